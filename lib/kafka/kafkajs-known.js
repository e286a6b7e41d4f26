'use strict'

// What kafkajs-patch.js needs only once something reads a file it put in
// place (kafkajs's producer as it loads, kafkajsPatchStatus(), anyone reading
// require.cache), never at start: whether the kafkajs found is exactly the
// one corrected (each file's hash), and the linear grouping that replaces
// one of its files.
const fs = require('node:fs')
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
function remembering (s, { createSendMessagesFactory, unpoisoned }, dir) {
  const createSendMessages = createSendMessagesFactory(dir)
  return function (options) {
    s.loggers.add(options.logger)
    return createSendMessages({ ...options, eosManager: unpoisoned(options.eosManager, dir) })
  }
}

module.exports = { groupMessagesPerPartition, isKnownKafkajs, remembering, KNOWN }
