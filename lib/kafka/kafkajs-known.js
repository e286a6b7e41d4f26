'use strict'

// What kafkajs-patch.js needs only once something reads a file it put in
// place (kafkajs's producer as it loads, kafkajsPatchStatus(), anyone reading
// require.cache) or wrapProducer() checks a producer, never at start: whether
// the kafkajs found is exactly the one corrected (each file's hash), what
// replaces its files, and the warnings. Its state (`s`) is kafkajs-patch.js's.
const fs = require('node:fs')
const Module = require('node:module')
const path = require('node:path')

// Each file's length and a 64-bit hash of its bytes (fingerprint() below).
const KNOWN = {
  'src/producer/sendMessages.js': '6079:392d861f11a9e814',
  'src/producer/groupMessagesPerPartition.js': '384:696e1499f2d86474',
  'src/protocol/recordBatch/record/v0/index.js': '1886:9217f0899f49cf7d',
  // How the three are called, and what a record is made of: read, not replaced.
  'src/producer/messageProducer.js': '4189:a9f2a147f583a89d',
  'src/producer/createTopicData.js': '308:0e3535b443d26241',
  'src/producer/responseSerializer.js': '148:a3ec1201a4fb5901',
  'src/protocol/requests/produce/v3/request.js': '3112:867b241a2fa82b16',
  'src/protocol/recordBatch/header/v0/index.js': '247:240f1433de6d9826',
  'src/protocol/encoder.js': '10222:46b4bc84e756342b',
  // What the corrected sendMessages sends its Produce request through, and
  // the response it reads partition by partition (v7 is v6's).
  'src/broker/index.js': '33041:ac95830527fbde3f',
  'src/protocol/requests/produce/index.js': '2786:4f1c9cb4f60f2b10',
  'src/protocol/requests/produce/v3/response.js': '1323:60da63fe86e413dd',
  'src/protocol/requests/produce/v5/response.js': '1126:288ce361ff0c9d0f',
  'src/protocol/requests/produce/v6/response.js': '1000:a033c292e70f374c',
}

// The linear grouping: partition -> its messages in call order, the
// partitioner called once per message in the same order as kafkajs does.
function groupMessagesPerPartition ({ topic, partitionMetadata, messages, partitioner }) {
  // Without a prototype: a partition is read from the result's own
  // properties only, whatever was added to Object.prototype.
  const result = Object.create(null)
  if (partitionMetadata.length === 0) return result
  for (const message of messages) {
    const partition = partitioner({ topic, partitionMetadata, message })
    const list = result[partition]
    if (list === undefined) result[partition] = [message]
    else list.push(message)
  }
  return result
}

// Tells kafkajs's files from any edit of them: a release, a hand patch, a
// bundler's rewrite. Nobody gains by forging a match (whoever can write
// node_modules runs code anyway), so a fast non-cryptographic hash (two
// multiplicative 32-bit lanes, mixed at the end) serves, and node:crypto is
// never loaded for it: 15 KB hash in well under a millisecond.
function fingerprint (bytes) {
  let h1 = 0xdeadbeef ^ bytes.length
  let h2 = 0x41c6ce57 ^ bytes.length
  for (let i = 0; i < bytes.length; i++) {
    h1 = Math.imul(h1 ^ bytes[i], 2654435761)
    h2 = Math.imul(h2 ^ bytes[i], 1597334677)
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909)
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909)
  const hex = (n) => (n >>> 0).toString(16).padStart(8, '0')
  return `${bytes.length}:${hex(h2)}${hex(h1)}`
}

function isKnownKafkajs (dir) {
  try {
    return Object.entries(KNOWN).every(([name, hash]) => fingerprint(fs.readFileSync(path.join(dir, name))) === hash)
  } catch {
    return false
  }
}

// The corrected sendMessages (send-messages.js), remembering each producer it
// serves.
function remembering (s, { createSendMessagesFactory }, dir) {
  const { unpoisoned } = require('./unpoisoned')
  const createSendMessages = createSendMessagesFactory(dir)
  return function (options) {
    s.loggers.add(options.logger)
    return createSendMessages({ ...options, eosManager: unpoisoned(options.eosManager, dir) })
  }
}

function warnOnce (s, message) {
  if (s.warned) return
  s.warned = true
  process.emitWarning(message, { code: 'IO_HYGIENE_KAFKAJS_NOT_PATCHED', type: 'IoHygieneWarning' })
}

// The check of the files putInPlace() put in require.cache (`placed`), run
// at the first read of one. Known: the corrected exports, as plain data from
// then on. Any other kafkajs: the entries leave require.cache, and each read
// loads the file itself, so kafkajs runs as it ships.
function checkPlaced (s, placed) {
  const { dir, entries } = placed
  placed.known = isKnownKafkajs(dir)
  if (placed.known) {
    for (const entry of entries) {
      if (ownsExports(entry)) entry.ours = setExports(entry.module, corrected(s, dir, entry.name))
    }
    s.status = 'patched'
    return
  }
  for (const entry of entries) if (stillOurs(entry)) delete require.cache[entry.filename]
  s.status = 'unknown-version'
  warnOnce(s, `the kafkajs in ${dir} is not the kafkajs 2.2.x that io-hygiene corrects; it is left alone (its grouping can stall the event loop, its retry can acknowledge unwritten messages on a cluster)`)
}

// What replaces the file `name` of the kafkajs in `dir`. sendMessages loads
// with kafkajs's producer, the record encoder with its produce request.
function corrected (s, dir, name) {
  if (name === 'src/producer/sendMessages.js') return remembering(s, require('./send-messages'), dir)
  if (name === 'src/producer/groupMessagesPerPartition.js') return groupMessagesPerPartition
  return require('./record-encoder').createRecordEncoder(require(path.join(dir, 'src/protocol/encoder')), originalOf(path.join(dir, name)))
}

// Whether an entry's exports, and its place in require.cache, are still
// ours (the getter put there, or the corrected exports that replaced it):
// read without running the check.
function stillOurs (entry) {
  return require.cache[entry.filename] === entry.module && ownsExports(entry)
}

function ownsExports ({ module, ours }) {
  const { get, value } = Object.getOwnPropertyDescriptor(module, 'exports')
  return (get ?? value) === ours
}

// wrapProducer()'s check: whether the producer was made by a corrected
// kafkajs. One that was not keeps the retry that can acknowledge unwritten
// messages of a call spanning brokers, so wrapProducer() never merges calls
// for it; said once, unless the operator turned the patch off. An
// idempotent one is refused: its sequence numbers can acknowledge a send
// the broker dropped when leaders move, one call per request or not (on a
// three-node cluster as often wrapped as plain), and a warning at start
// would be followed by silent loss. Turned off on purpose, it is the
// operator's choice.
function checkProducer (s, producer, where) {
  let logger
  try {
    logger = producer.logger()
  } catch {}
  if (s.loggers.has(logger)) return true
  if (s.status !== 'off' && typeof producer.isIdempotent === 'function' && producer.isIdempotent() === true) {
    // Loaded here: this file is read at every start, the errors only by a refusal.
    const { ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER } = require('../core/errors')
    throw new ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER(where, 'an idempotent producer of a kafkajs that io-hygiene has not corrected', `(loaded before install(), a copy it did not find, or not the kafkajs 2.2.x it corrects: ${s.status}) is refused: kafkajs's idempotent retry can acknowledge messages that were never written when partition leaders move. Load io-hygiene first: start node with -r io-hygiene/register (or --import io-hygiene/register), or call install() before kafkajs is first required (or set IO_HYGIENE_KAFKAJS=0 to keep kafkajs's own behaviour on purpose)`)
  }
  if (s.status !== 'off') warnOnce(s, 'wrapProducer() was given a producer from a kafkajs that io-hygiene has not corrected (loaded before install(), from a copy it did not find, or not the kafkajs 2.2.x it corrects): it sends each call as kafkajs does, in a request of its own, without batching. Start node with -r io-hygiene/register, or call install() before kafkajs is required')
  return false
}

// kafkajs's own export of a file whose require.cache entry is ours, loaded
// beside it at its first call (the record encoder hands it what it does not
// take, which most services never send).
function originalOf (filename) {
  let exports = null
  return (...args) => {
    if (exports === null) {
      // A module that requires relative to the file, as Node's loader makes.
      const m = new Module(filename, null)
      m.filename = filename
      m.paths = Module._nodeModulePaths(path.dirname(filename))
      m._compile(require('node:fs').readFileSync(filename, 'utf8'), filename)
      exports = m.exports
    }
    return exports(...args)
  }
}

// A module's exports as the plain data property Node's loader makes.
function setExports (m, value) {
  Object.defineProperty(m, 'exports', { value, writable: true, enumerable: true, configurable: true })
  return value
}

module.exports = { checkPlaced, checkProducer, warnOnce, setExports, stillOurs, groupMessagesPerPartition, KNOWN }
