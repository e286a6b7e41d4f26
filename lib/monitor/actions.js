'use strict'

const fs = require('node:fs')
const path = require('node:path')

// CPU profiles through node:inspector, in this thread: one at a time in the
// process, for a bounded time, written whole (to a temporary name, then
// renamed) so a reader never sees half a file. The timer is unref'd: a
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
        fs.mkdirSync(path.dirname(profile.file), { recursive: true })
        fs.writeFileSync(`${profile.file}.tmp`, JSON.stringify(result.profile))
        fs.renameSync(`${profile.file}.tmp`, profile.file)
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
  fs.mkdirSync(path.dirname(file), { recursive: true })
  return require('node:v8').writeHeapSnapshot(file)
}

module.exports = { busy, startProfile, stopProfile, heapSnapshot }
