'use strict'

const fs = require('node:fs')
const path = require('node:path')

// CPU profiles through node:inspector, in this thread: one at a time in the
// process, for a bounded time, written whole (see publish()) so a reader
// never sees half a file. The timer is unref'd: a
// profile never keeps the process alive, and one in flight at exit is lost.
//
// One session for the process, connected on first use and never
// disconnected: disabling the Profiler domain (which disconnecting does)
// switches V8's coverage for the whole isolate back to best effort
// (V8ProfilerAgentImpl::disable stops precise coverage), silently breaking
// c8 / NODE_V8_COVERAGE in the process being diagnosed.
let session = null
let current = null // { owner, file, timer, done, onError }

function busy () {
  return current !== null
}

// Resolves with the file once written, or null if the write failed (then
// `onError` was called).
function startProfile (owner, file, durationMs, onError) {
  if (session === null) {
    const inspector = require('node:inspector')
    session = new inspector.Session()
    session.connect()
    session.post('Profiler.enable')
  }
  // Commands run in order on a same-thread session; a failed start shows as
  // a failed stop, handled there.
  session.post('Profiler.start')
  const profile = { owner, file, timer: null, done: null, onError }
  profile.timer = setTimeout(stopProfile, durationMs, owner)
  profile.timer.unref()
  current = profile
  return new Promise((resolve) => { profile.done = resolve })
}

// Stops the profile in flight if `owner` started it.
function stopProfile (owner) {
  const profile = current
  if (profile === null || profile.owner !== owner) return
  current = null
  clearTimeout(profile.timer)
  session.post('Profiler.stop', (error, result) => {
    if (!error) {
      try {
        publish(profile.file, (tmp) => fs.writeFileSync(tmp, JSON.stringify(result.profile), { mode: FILE_MODE, flag: 'wx' }))
      } catch (err) {
        error = err
      }
    }
    if (error) profile.onError(error)
    profile.done(error ? null : profile.file)
  })
}

// A heap snapshot blocks the thread while V8 writes it and needs memory of
// the order of the heap, so it is taken only under `maxBytes` of used heap.
function heapSnapshot (file, heapUsedBytes, maxBytes) {
  if (heapUsedBytes > maxBytes) return null
  return publish(file, (tmp) => require('node:v8').writeHeapSnapshot(tmp))
}

// Profiles and snapshots hold source, and a snapshot every string in the
// heap (tokens, personal data): for the process's user alone.
const FILE_MODE = 0o600
const DIR_MODE = 0o700

// Writes a file that appears whole under `file` or not at all, and never
// into or through something already there: it is written in a fresh
// private directory (mkdtemp: a random name, 0700), made 0600, then
// hard-linked to its name, which fails (EEXIST) whatever holds the name, a
// file or a symlink. The directories it creates are 0700.
function publish (file, write) {
  const dir = path.dirname(file)
  fs.mkdirSync(dir, { recursive: true, mode: DIR_MODE })
  // Taken already: fail before the costly write (the link below is what
  // makes it exclusive).
  if (fs.existsSync(file) || isLink(file)) throw Object.assign(new Error(`EEXIST: file already exists, ${file}`), { code: 'EEXIST', path: file })
  const scratch = fs.mkdtempSync(path.join(dir, '.io-hygiene-'))
  try {
    const tmp = path.join(scratch, path.basename(file))
    write(tmp)
    fs.chmodSync(tmp, FILE_MODE)
    fs.linkSync(tmp, file)
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true })
  }
  return file
}

function isLink (file) {
  try {
    return fs.lstatSync(file).isSymbolicLink()
  } catch {
    return false
  }
}

const OWN_FILE = /^io-hygiene-.*\.(cpuprofile|heapsnapshot)$/

// Whether `dir` has room for one more of our files: fewer than `maxFiles`
// of them, holding less than `maxBytes`. Other files are not ours to count.
function hasRoom (dir, maxFiles, maxBytes) {
  let names
  try {
    names = fs.readdirSync(dir)
  } catch (err) {
    if (err.code === 'ENOENT') return maxFiles > 0 && maxBytes > 0
    throw err
  }
  let files = 0
  let bytes = 0
  for (const name of names) {
    if (!OWN_FILE.test(name)) continue
    let stat
    try {
      stat = fs.lstatSync(path.join(dir, name))
    /* c8 ignore next 3 -- removed between readdir and lstat: a race no test can order */
    } catch {
      continue
    }
    if (!stat.isFile()) continue
    files++
    bytes += stat.size
  }
  return files < maxFiles && bytes < maxBytes
}

module.exports = { busy, startProfile, stopProfile, heapSnapshot, hasRoom }
