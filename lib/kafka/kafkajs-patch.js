'use strict'

// Corrected parts of kafkajs 2.2.x's producer, put in its place before it is
// loaded. kafkajs has had no release since 2.2.4: a frozen dependency is a
// stable target, and each file is replaced only when its content is exactly
// the known one (a hash, not the version string), so any other kafkajs is
// left alone.
//
// - src/producer/groupMessagesPerPartition.js copies a partition's array for
//   every message (quadratic in a request's size, redone at every retry):
//   replaced by a linear grouping with the identical result.
// - src/producer/sendMessages.js retries only brokers that had not answered,
//   after re-partitioning every message: a partition whose leader moved to a
//   broker that had answered is never sent again and the call resolves
//   anyway (a false acknowledgement), and a retry can start while another
//   broker's request of the same call is in flight (a duplicate with new
//   sequence numbers). Replaced by send-messages.js, which partitions a call once, sends each
//   partition until a response covers it, retries only once every request of
//   the attempt has settled, and gives an idempotent producer a fresh producer
//   id when the broker lost its sequence state. It reads each response
//   partition by partition (kafkajs's parse throws at the first partition
//   with an error, and what the broker wrote for the others goes again): a
//   partition written is done, one refused goes again alone or fails alone.
// - src/protocol/recordBatch/record/v0/index.js builds each record in a
//   buffer of its own, most of a produced message's CPU: replaced by
//   record-encoder.js, the same bytes written once.
//
// The mechanism is require.cache: a module entry for each file, made before
// kafkajs's producer requires it. Made for the kafkajs the application
// loads, wherever it is: for the one resolved from its main module or
// working directory at once, and for any other when its producer's file is
// first compiled (a wrapper of the loader's '.js' compile, which sees each
// file once, not each require). No hook on resolution.
const { sharedSlot, wrap } = require('../core/global-slot')
const Module = require('node:module')
const path = require('node:path')

// The files put in place (sendMessages, the grouping, the record) and the
// producer that requires them; kafkajs-known.js holds each known file's hash.
const SEND_MESSAGES = 'src/producer/sendMessages.js'
const GROUP_MESSAGES = 'src/producer/groupMessagesPerPartition.js'
const MESSAGE_PRODUCER = 'src/producer/messageProducer.js'
const RECORD = 'src/protocol/recordBatch/record/v0/index.js'

const kState = Symbol.for('io-hygiene.kafkajs.patch.v1')

// One state per process, shared by every copy of io-hygiene:
// 'patched' | 'off' | 'not-installed' | 'not-found' | 'loaded-too-early' | 'unknown-version'.
// `pending`: the content checks still to run, if any (see putInPlace()).
// `loggers`: the loggers of producers made by a corrected kafkajs (a kafkajs
// producer's logger() is the one its sendMessages is given).
// `hooked`: the loader's '.js' compile watches for kafkajs.
function state () {
  const s = sharedSlot(kState, () => ({ status: 'not-installed', dir: null, warned: false, pending: null }))
  s.loggers ??= new WeakSet()
  return s
}

// The kafkajs the application would likely load: resolved from its main
// module, then the working directory. Under -r or --import there is no main
// module yet, and the working directory may be anywhere: the load hook
// (hookLoads()) corrects whichever kafkajs is loaded in the end.
function findKafkajs () {
  const from = [require.main?.path, process.cwd()].filter(Boolean)
  try {
    return path.dirname(require.resolve('kafkajs', { paths: from }))
  } catch {
    return null
  }
}

// The undo of an install that changed nothing.
function nothing () {}

const PRODUCER_FILE = path.join('kafkajs', MESSAGE_PRODUCER)

// The kafkajs whose producer is already loaded, if any (a scan of
// require.cache, once per install).
function loadedKafkajs () {
  for (const filename of Object.keys(require.cache)) {
    if (filename.endsWith(PRODUCER_FILE)) return filename.slice(0, -MESSAGE_PRODUCER.length - 1)
  }
  return null
}

// Puts the corrected files in require.cache: for `dir` when given, else
// for the kafkajs the application loads. Returns the undo, which removes the
// entries if they are still ours (a kafkajs loaded meanwhile keeps what it
// captured).
function installKafkajsPatch (options = {}) {
  const s = state()
  if (Object.hasOwn(options, 'dir')) return installAt(s, options.dir)
  const loaded = loadedKafkajs()
  if (loaded !== null) return installAt(s, loaded)
  const undoAt = installAt(s, findKafkajs())
  const undoHook = hookLoads(s)
  return () => {
    undoHook()
    undoAt()
  }
}

// Watches the loader's '.js' compile for a kafkajs producer's file, and puts
// the corrected files of that kafkajs in place just before it is compiled
// (it requires them as it runs). A file compiles once, so the check runs
// once per file the process loads; a cached require never reaches it.
function hookLoads (s) {
  if (s.hooked) return nothing
  s.hooked = true
  const undos = []
  const unwrap = wrap(Module._extensions, '.js', (compile) => function (module, filename) {
    if (filename.endsWith(PRODUCER_FILE)) undos.push(installBeforeLoad(s, filename.slice(0, -MESSAGE_PRODUCER.length - 1)))
    return compile.call(this, module, filename)
  })
  return () => {
    if (unwrap()) s.hooked = false
    for (const undo of undos) undo()
  }
}

// The producer of `dir` is being compiled: its files go in place unless one
// is loaded already (then it keeps kafkajs's own).
function installBeforeLoad (s, dir) {
  const entry = require.cache[path.join(dir, SEND_MESSAGES)]
  if (entry?.[kState] === true) return nothing
  if (entry !== undefined) return installAt(s, dir)
  s.dir = dir
  return putInPlace(s, dir)
}

function installAt (s, dir) {
  if (dir === null) {
    s.status = 'not-found'
    return nothing
  }
  s.dir = dir
  // Already in place (by an earlier call, or another copy of io-hygiene):
  // checked, or to be checked when first read.
  if (require.cache[path.join(dir, SEND_MESSAGES)]?.[kState] === true) return nothing
  if (require.cache[path.join(dir, MESSAGE_PRODUCER)] !== undefined) {
    s.status = 'loaded-too-early'
    require('./kafkajs-known').warnOnce(s, 'kafkajs was loaded before io-hygiene, so its producer keeps the grouping that stalls the event loop and the retry that can acknowledge unwritten messages on a cluster: call install() or start node with -r io-hygiene/register before kafkajs is required')
    return nothing
  }
  return putInPlace(s, dir)
}

// The entries go in at once, but the files' content is checked (fourteen files
// read and hashed, a millisecond a service pays at every start) only when
// something first reads an entry's exports: kafkajs's producer as it loads,
// anyone else reading require.cache, or kafkajsPatchStatus(). Node's CommonJS
// loader (22, 24 and 26) returns a loaded cached module's `exports`, so an
// accessor there runs exactly then: the check, the hashes and what replaces
// the files are in kafkajs-known.js, which loads only then.
function putInPlace (s, dir) {
  // known: null until checked.
  const placed = { dir, known: null, entries: [SEND_MESSAGES, GROUP_MESSAGES, RECORD].map((name) => ({ name, filename: path.join(dir, name) })) }
  const known = () => require('./kafkajs-known')
  const check = () => {
    if (placed.known !== null) return
    if (s.pending === check) s.pending = null
    known().checkPlaced(s, placed)
  }
  for (const entry of placed.entries) {
    const m = moduleAt(entry.filename)
    m.loaded = true
    m[kState] = true
    entry.module = m
    entry.ours = () => {
      check()
      // Known: check() has made the exports plain data.
      if (placed.known) return m.exports
      return known().setExports(m, require(entry.filename))
    }
    Object.defineProperty(m, 'exports', {
      get: entry.ours,
      // Whoever assigns exports (a test's mock) replaces ours, as on any module.
      set: (value) => known().setExports(m, value),
      enumerable: true,
      configurable: true,
    })
    require.cache[entry.filename] = m
  }

  // In place, not yet checked: 'patched' is the answer unless the check says
  // otherwise, and kafkajsPatchStatus() runs it (and any other copy's)
  // before it answers.
  s.status = 'patched'
  const before = s.pending
  s.pending = before === null ? check : () => { before(); check() }
  return () => {
    // Undone before anything read the entries: nothing to check, and a module
    // someone still holds loads the file itself.
    if (placed.known === null) {
      placed.known = false
      if (s.pending === check) s.pending = null
    }
    for (const entry of placed.entries) if (known().stillOurs(entry)) delete require.cache[entry.filename]
    if (s.status === 'patched') s.status = 'not-installed'
  }
}

// A module for `filename` that requires relative to it, as Node's loader makes.
// Its lookup paths are worked out when first read: most processes never do,
// and three of them cost a start as much as a small file's load.
function moduleAt (filename) {
  const m = new Module(filename, null)
  m.filename = filename
  const set = (value) => Object.defineProperty(m, 'paths', { value, writable: true, enumerable: true, configurable: true }).paths
  Object.defineProperty(m, 'paths', {
    get: () => set(Module._nodeModulePaths(path.dirname(filename))),
    set,
    enumerable: true,
    configurable: true,
  })
  return m
}

// wrapProducer()'s check (kafkajs-known.js says what it decides).
function checkProducer (producer, where) {
  kafkajsPatchStatus()
  return require('./kafkajs-known').checkProducer(state(), producer, where)
}

function kafkajsPatchStatus () {
  const s = state()
  s.pending?.()
  return s.status
}

// install()'s module: the patch, its status in install().stats(), its undo.
function applyKafkajsPatch () {
  const undo = installKafkajsPatch()
  return { value: { stats: () => ({ status: kafkajsPatchStatus() }) }, undo }
}

function turnOffKafkajsPatch () {
  const s = state()
  if (s.status === 'not-installed') s.status = 'off'
}

// wrapProducer() without install(): patched only if kafkajs's producer is not
// loaded yet (it usually is: then the warning says how to fix it), unless
// the operator turned the patch off (IO_HYGIENE_KAFKAJS=0).
function ensureKafkajsPatch (env = process.env) {
  const s = state()
  if (s.status !== 'not-installed') return
  const off = env.IO_HYGIENE_KAFKAJS
  if (off === '0' || off === 'false') {
    s.status = 'off'
    return
  }
  installKafkajsPatch()
}

module.exports = {
  installKafkajsPatch,
  applyKafkajsPatch,
  ensureKafkajsPatch,
  turnOffKafkajsPatch,
  kafkajsPatchStatus,
  checkProducer,
}
