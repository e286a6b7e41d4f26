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
//   sequence numbers). Replaced by one that partitions a call once, sends each
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
const { sharedSlot } = require('../core/global-slot')
const fs = require('node:fs')
const Module = require('node:module')
const path = require('node:path')
const { wrap } = require('../core/patch')

// Each file's length and a 64-bit hash of its bytes (fingerprint() below).
const SEND_MESSAGES = 'src/producer/sendMessages.js'
const GROUP_MESSAGES = 'src/producer/groupMessagesPerPartition.js'
const MESSAGE_PRODUCER = 'src/producer/messageProducer.js'
const RECORD = 'src/protocol/recordBatch/record/v0/index.js'
const KNOWN = {
  [SEND_MESSAGES]: '6079:392d861f11a9e814',
  [GROUP_MESSAGES]: '384:696e1499f2d86474',
  [RECORD]: '1886:9217f0899f49cf7d',
  // How the three are called, and what a record is made of: read, not replaced.
  [MESSAGE_PRODUCER]: '4189:a9f2a147f583a89d',
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

// What a call leaves for wrapProducer(), on its result (a non-enumerable
// property) and on its error: `assigned`, each messages array of the request
// -> the partition of each message by its position (records, not objects:
// one object may be sent twice, to two partitions), or NO_PARTITION /
// PARTITIONER_THREW (`thrown`: message -> the partitioner's error);
// `positions`, the same arrays -> each message's place in its partition's
// batch; `pending`, the "topic\0partition" keys no response covered;
// `entries`, the RecordMetadata of those it did; `refused`, the keys a
// broker refused for good -> its error; `topics`, the topics the cluster
// refused -> its error. A retry then sends the rest to the same partitions (the
// idempotent producer's sequence numbers can then drop a copy the broker
// wrote without answering), and each caller gets its own partition's entry.
const kOutcome = Symbol.for('io-hygiene.kafkajs.outcome.v1')
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

// The errors after which an idempotent producer's sequence numbers no longer
// match the broker's: a fresh producer id starts them again at 0
// (librdkafka and @platformatic/kafka recover the same way).
const SEQUENCE_LOST = new Set(['OUT_OF_ORDER_SEQUENCE_NUMBER', 'UNKNOWN_PRODUCER_ID'])
// A topic the cluster's Metadata answer refuses as a whole: it has no
// partition to send to, whatever the other topics of the call.
const TOPIC_REFUSED = new Set(['UNKNOWN_TOPIC_OR_PARTITION', 'TOPIC_AUTHORIZATION_FAILED', 'INVALID_TOPIC_EXCEPTION'])
// A partition's answer that refuses its batch for what the batch holds, not
// for where it went: sent again as it is, it gets the same answer (kafkajs
// calls CORRUPT_MESSAGE retriable; the Java producer splits or fails such a
// batch, it never sends it again whole).
const RECORD_REFUSED = new Set(['INVALID_RECORD', 'MESSAGE_TOO_LARGE', 'INVALID_TIMESTAMP', 'CORRUPT_MESSAGE', 'RECORD_LIST_TOO_LARGE'])
// The broker holds this batch already (a retry of one it wrote): written,
// as the Java producer reads it.
const DUPLICATE_SEQUENCE_NUMBER = 46
// On a messages array of wrapProducer()'s (one per topic of a request): each
// message carries its own caller, so one message's fate is never the
// call's. A topic the cluster refuses, a partitioner that throws, or a
// partition the topic does not have then fails only its own messages, and
// the call resolves with the outcome (kOutcome) that says which. kafkajs's
// own callers keep its all-or-nothing call.
const kPerRecord = Symbol.for('io-hygiene.kafkajs.per-record.v1')
// A message's partition in kOutcome's `assigned` when it has none: the
// partitioner named no partition of the topic, or threw (`thrown` has why).
const NO_PARTITION = -1
const PARTITIONER_THREW = -2

const asIs = async (data) => data

function isPartitionOf (partitionMetadata, partition) {
  if (!Number.isInteger(partition) || partition < 0) return false
  for (let i = 0; i < partitionMetadata.length; i++) if (partitionMetadata[i].partitionId === partition) return true
  return false
}

function createSendMessagesFactory (dir) {
  const internal = (file) => require(path.join(dir, 'src', file))
  return function createSendMessages ({ logger, cluster, partitioner, eosManager, retrier }) {
    const { KafkaJSMetadataNotLoaded, KafkaJSError } = internal('errors')
    const { staleMetadata, createErrorFromCode } = internal('protocol/error')
    const apiKeys = internal('protocol/requests/apiKeys')
    const { requests } = internal('protocol/requests')

    // broker.produce() reads the response with kafkajs's parse, which throws
    // at the first partition with an error: what the broker wrote for the
    // other partitions is lost with it, and is sent again. The same request,
    // on the same connection pool, its response read partition by partition.
    async function produceRequest (broker, args) {
      if (typeof broker.lookupRequest !== 'function' || typeof broker.connectionPool?.send !== 'function') return broker.produce(args)
      const { request, response } = broker.lookupRequest(apiKeys.Produce, requests.Produce)(args)
      try {
        return await broker.connectionPool.send({ request, response: { decode: response.decode, parse: asIs } })
      } catch (error) {
        // As the broker's own send does.
        if (error.name === 'KafkaJSConnectionClosedError') await broker.disconnect()
        throw error
      }
    }

    // The call's topics into the cluster's metadata. kafkajs's Metadata
    // answer throws at the first topic refused (unknown with auto-creation
    // off, not authorized, an invalid name): for wrapProducer()'s calls the
    // topic at fault is found and set aside, and the others go on. A topic
    // the producer has had metadata for is not refused: a node restarted a
    // moment ago can answer that it does not know it yet (kafkajs keeps its
    // targets when the answer refuses one), and the call is retried, as
    // kafkajs retries it.
    async function addTopics (topics, perRecord, refusedTopics) {
      if (!perRecord) return cluster.addMultipleTargetTopics(topics)
      const wanted = refusedTopics.size === 0 ? topics : topics.filter((topic) => !refusedTopics.has(topic))
      if (wanted.length === 0) return
      try {
        await cluster.addMultipleTargetTopics(wanted)
      } catch (error) {
        if (!TOPIC_REFUSED.has(error?.type)) throw error
        if (wanted.length === 1) {
          refuseTopic(wanted[0], error, refusedTopics)
          return
        }
        for (const topic of wanted) {
          try {
            await cluster.addMultipleTargetTopics([topic])
          } catch (error) {
            if (!TOPIC_REFUSED.has(error?.type)) throw error
            refuseTopic(topic, error, refusedTopics)
          }
        }
      }
    }

    function refuseTopic (topic, error, refusedTopics) {
      if (cluster.targetTopics.has(topic)) throw error
      refusedTopics.set(topic, error)
    }

    // Assigned once for the whole call: "topic\0partition" -> its messages in
    // call order; each message's partition (kOutcome's `assigned`) and its
    // place in that partition's batch (`positions`), by its position in its
    // topic's messages. Maps, not objects: nothing is read through
    // Object.prototype.
    async function assign (topicMessages, refusedTopics) {
      await cluster.refreshMetadataIfNecessary()
      const pending = new Map()
      const assigned = new Map()
      const positions = new Map()
      let thrown = null
      for (const { topic, messages } of topicMessages) {
        if (refusedTopics.has(topic)) continue
        const partitionMetadata = cluster.findTopicPartitionMetadata(topic)
        if (partitionMetadata.length === 0) {
          logger.debug('Producing to topic without metadata', { topic, targetTopics: Array.from(cluster.targetTopics) })
          throw new KafkaJSMetadataNotLoaded('Producing to topic without metadata')
        }
        const perRecord = messages[kPerRecord] === true
        // One tight loop around the partitioner (no key built per message):
        // the event loop is held for the whole of it.
        const partitions = new Array(messages.length)
        const position = new Array(messages.length)
        const perPartition = new Map()
        for (let i = 0; i < messages.length; i++) {
          const message = messages[i]
          let partition
          try {
            // As kafkajs reads its grouping's keys back: a number.
            partition = Number(partitioner({ topic, partitionMetadata, message }))
          } catch (error) {
            if (!perRecord) throw error
            thrown ??= new Map()
            thrown.set(message, error)
            partitions[i] = PARTITIONER_THREW
            continue
          }
          let list = perPartition.get(partition)
          if (list === undefined) {
            // kafkajs sends a partition its metadata does not have nowhere,
            // and resolves: its messages are never written.
            if (!isPartitionOf(partitionMetadata, partition)) {
              partitions[i] = NO_PARTITION
              continue
            }
            perPartition.set(partition, (list = []))
          }
          partitions[i] = partition
          position[i] = list.length
          list.push(message)
        }
        for (const [partition, list] of perPartition) pending.set(`${topic}\0${partition}`, { topic, partition, messages: list })
        assigned.set(messages, partitions)
        positions.set(messages, position)
      }
      return { pending, assigned, positions, thrown }
    }

    // What is still to send, by the node leading each partition now. A
    // partition without a leader (an election under way) or missing from
    // the metadata waits for the next attempt.
    function perLeader (pending) {
      const perTopic = new Map()
      for (const entry of pending.values()) {
        const list = perTopic.get(entry.topic)
        if (list === undefined) perTopic.set(entry.topic, [entry])
        else list.push(entry)
      }
      const perNode = new Map() // nodeId -> topic -> partitions
      let leaderless = false
      for (const [topic, entries] of perTopic) {
        const leaderOf = new Map()
        for (const p of cluster.findTopicPartitionMetadata(topic)) leaderOf.set(p.partitionId, p.leader)
        for (const { partition, messages } of entries) {
          const leader = leaderOf.get(partition)
          if (!Number.isInteger(leader) || leader < 0) {
            leaderless = true
            continue
          }
          let topics = perNode.get(leader)
          if (topics === undefined) perNode.set(leader, (topics = new Map()))
          let partitions = topics.get(topic)
          if (partitions === undefined) topics.set(topic, (partitions = []))
          partitions.push({ partition, messages })
        }
      }
      return { perNode, leaderless }
    }

    // One broker's part of an attempt. The broker answers each partition on
    // its own: one written is done (never sent again); one refused goes to
    // `refusals`, its sequence numbers given back (the broker wrote none of
    // its batch, so the next batch of that partition reuses them).
    async function produce (broker, topicData, request, pending, results, refusals) {
      await eosManager.acquireBrokerLock(broker)
      try {
        if (eosManager.isTransactional()) await eosManager.addPartitionsToTransaction(topicData)
        for (const { topic, partitions } of topicData) {
          for (const entry of partitions) {
            entry.firstSequence = eosManager.getSequence(topic, entry.partition)
            eosManager.updateSequence(topic, entry.partition, entry.messages.length)
          }
        }
        let response
        try {
          response = await produceRequest(broker, {
            transactionalId: eosManager.isTransactional() ? eosManager.getTransactionalId() : undefined,
            producerId: eosManager.getProducerId(),
            producerEpoch: eosManager.getProducerEpoch(),
            acks: request.acks ?? -1,
            timeout: request.timeout ?? 30000,
            compression: request.compression ?? 0,
            topicData,
          })
        } catch (error) {
          // Not acknowledged: the same sequence numbers go out again, so that
          // the broker drops what it wrote without answering.
          for (const { topic, partitions } of topicData) {
            for (const entry of partitions) eosManager.updateSequence(topic, entry.partition, -entry.messages.length)
          }
          throw error
        }
        if (request.acks === 0) {
          for (const { topic, partitions } of topicData) for (const { partition } of partitions) pending.delete(`${topic}\0${partition}`)
          return
        }
        // Only what the response covers is done; the rest goes again.
        for (const { topicName, partitions } of response.topics) {
          for (const answer of partitions) {
            const key = `${topicName}\0${answer.partition}`
            const entry = pending.get(key)
            if (entry === undefined) continue
            const code = answer.errorCode
            if (code === 0 || code === undefined || code === DUPLICATE_SEQUENCE_NUMBER) {
              pending.delete(key)
              results.push({ topicName, ...answer })
            } else {
              eosManager.updateSequence(topicName, answer.partition, -entry.messages.length)
              refusals.push({ key, error: createErrorFromCode(code) })
            }
          }
        }
      } finally {
        await eosManager.releaseBrokerLock(broker)
      }
    }

    return async function sendMessages (request) {
      const { topicMessages } = request
      let call = null // assign()'s
      const results = []
      // What failed for good, each alone: "topic\0partition" -> the broker's
      // error for its batch; topic -> the cluster's error for the topic.
      const refused = new Map()
      const refusedTopics = new Map()
      const topics = topicMessages.map(({ topic }) => topic)
      let perRecord = false
      for (const { messages } of topicMessages) if (messages?.[kPerRecord] === true) perRecord = true
      // For wrapProducer()'s calls, an attempt that settled some partitions
      // and must retry others ends the call: its callers' fates are known
      // now, and the wrapper sends the rest again alone (`retry` says why).
      let retry = null
      const outcome = () => call === null
        ? null
        : { assigned: call.assigned, positions: call.positions, pending: call.pending, entries: results, refused, topics: refusedTopics, thrown: call.thrown, retry }
      try {
        await retrier(async (bail, retryCount, retryTime) => {
          await addTopics(topics, perRecord, refusedTopics)
          let failure = null
          let uncovered = null
          const settledBefore = results.length + refused.size
          const later = (e) => {
            if (!perRecord || results.length + refused.size === settledBefore) throw e
            retry = e
          }
          try {
            call ??= await assign(topicMessages, refusedTopics)
            const { pending } = call
            const { perNode, leaderless } = perLeader(pending)
            // Every request of the attempt settles before the next attempt:
            // a partition never has two in flight.
            // Each broker's entries, in node id order once all have settled:
            // kafkajs's order, whichever broker answered first.
            const perNodeResults = new Map()
            const refusals = []
            const settled = await Promise.allSettled(Array.from(perNode, async ([nodeId, topicMap]) => {
              const own = []
              perNodeResults.set(nodeId, own)
              const broker = await cluster.findBroker({ nodeId })
              const topicData = Array.from(topicMap, ([topic, partitions]) => ({ topic, partitions }))
              await produce(broker, topicData, request, pending, own, refusals)
            }))
            for (const nodeId of Array.from(perNodeResults.keys()).sort((a, b) => Number(a) - Number(b))) {
              for (const entry of perNodeResults.get(nodeId)) results.push(entry)
            }
            for (const outcome of settled) if (outcome.status === 'rejected') failure ??= outcome.reason
            // A partition refused for what it holds, or for good, is done:
            // only its own messages fail. One refused for where it went (a
            // moved leader, too few replicas) goes again, alone.
            for (const { key, error } of refusals) {
              if (SEQUENCE_LOST.has(error.type) || (error.retriable && !RECORD_REFUSED.has(error.type))) {
                failure ??= error
              } else {
                pending.delete(key)
                refused.set(key, error)
              }
            }
            if (pending.size === 0) {
              if (perRecord || (refused.size === 0 && call.thrown === null)) return
              // kafkajs's own callers: the call fails, with the first refusal.
              bail(refused.values().next().value)
              return
            }
            if (failure === null) {
              failure = uncovered = new KafkaJSError(leaderless
                ? 'A partition of the request has no leader'
                : 'A produce response did not cover every partition of its request', { retriable: true })
            }
          } catch (error) {
            failure = error
          }
          const e = failure
          if (SEQUENCE_LOST.has(e.type) && !eosManager.isTransactional() && eosManager.isInitialized()) {
            logger.warn(`${e.message}: a fresh producer id`, { retryCount, retryTime })
            await eosManager.initProducerId()
            throw new KafkaJSError(e, { retriable: true, cause: e })
          }
          if (e.name === 'KafkaJSConnectionClosedError') cluster.removeBroker({ host: e.host, port: e.port })
          if (!cluster.isConnected()) {
            logger.debug(`Cluster has disconnected, reconnecting: ${e.message}`, { retryCount, retryTime })
            await cluster.connect()
            await cluster.refreshMetadata()
            return later(e)
          }
          if (e === uncovered || staleMetadata(e) || e.name === 'KafkaJSMetadataNotLoaded' || e.name === 'KafkaJSConnectionError' ||
            e.name === 'KafkaJSConnectionClosedError' || (e.name === 'KafkaJSProtocolError' && e.retriable)) {
            logger.error(`Failed to send messages: ${e.message}`, { retryCount, retryTime })
            await cluster.refreshMetadata()
            return later(e)
          }
          logger.error(`${e.message}`, { retryCount, retryTime })
          if (e.retriable) return later(e)
          bail(e)
        })
      } catch (error) {
        // Set on every error, so that one kafkajs throws again (a shared
        // connection error) never carries an earlier call's outcome.
        if (error !== null && typeof error === 'object') error[kOutcome] = outcome()
        throw error
      }
      Object.defineProperty(results, kOutcome, { value: outcome() })
      return results
    }
  }
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

function warnOnce (s, message) {
  if (s.warned) return
  s.warned = true
  process.emitWarning(message, { code: 'IO_HYGIENE_KAFKAJS_NOT_PATCHED', type: 'IoHygieneWarning' })
}

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
    warnOnce(s, 'kafkajs was loaded before io-hygiene, so its producer keeps the grouping that stalls the event loop and the retry that can acknowledge unwritten messages on a cluster: call install() or start node with -r io-hygiene/register before kafkajs is required')
    return nothing
  }
  return putInPlace(s, dir)
}

// The entries go in at once, but the files' content is checked (fourteen files
// read and hashed, a millisecond a service pays at every start) only when
// something first reads an entry's exports: kafkajs's producer as it loads,
// anyone else reading require.cache, or kafkajsPatchStatus(). Node's CommonJS
// loader (22, 24 and 26) returns a loaded cached module's `exports`, so an
// accessor there runs exactly then. Known files: the corrected exports, as
// plain data from then on. Any other kafkajs: the entries leave
// require.cache, and each read loads the file itself, so kafkajs runs as it
// ships.
function putInPlace (s, dir) {
  let known = null // null: not checked yet
  const entries = [
    { filename: path.join(dir, SEND_MESSAGES), corrected: () => remembering(s, createSendMessagesFactory(dir), dir) },
    { filename: path.join(dir, GROUP_MESSAGES), corrected: () => groupMessagesPerPartition },
    // Loaded with kafkajs's produce request, not at start-up.
    { filename: path.join(dir, RECORD), corrected: () => require('./record-encoder').createRecordEncoder(require(path.join(dir, 'src/protocol/encoder')), originalOf(path.join(dir, RECORD))) },
  ]
  for (const entry of entries) {
    const m = moduleAt(entry.filename)
    m.loaded = true
    m[kState] = true
    entry.module = m
    entry.get = () => {
      check()
      // Known: check() has made the exports plain data.
      if (known) return m.exports
      return setExports(m, require(entry.filename))
    }
    entry.ours = entry.get
    Object.defineProperty(m, 'exports', {
      get: entry.get,
      // Whoever assigns exports (a test's mock) replaces ours, as on any module.
      set: (value) => setExports(m, value),
      enumerable: true,
      configurable: true,
    })
    require.cache[entry.filename] = m
  }

  // Whether an entry's exports, and its place in require.cache, are still
  // ours: read without running the check.
  const ownsExports = ({ module, ours }) => {
    const { get, value } = Object.getOwnPropertyDescriptor(module, 'exports')
    return (get ?? value) === ours
  }
  const stillOurs = (entry) => require.cache[entry.filename] === entry.module && ownsExports(entry)

  function check () {
    if (known !== null) return
    known = isKnownKafkajs(dir)
    if (s.pending === check) s.pending = null
    if (known) {
      for (const entry of entries) {
        if (ownsExports(entry)) entry.ours = setExports(entry.module, entry.corrected())
      }
      s.status = 'patched'
      return
    }
    for (const entry of entries) if (stillOurs(entry)) delete require.cache[entry.filename]
    s.status = 'unknown-version'
    warnOnce(s, `the kafkajs in ${dir} is not the kafkajs 2.2.x that io-hygiene corrects; it is left alone (its grouping can stall the event loop, its retry can acknowledge unwritten messages on a cluster)`)
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
    if (known === null) {
      known = false
      if (s.pending === check) s.pending = null
    }
    for (const entry of entries) if (stillOurs(entry)) delete require.cache[entry.filename]
    if (s.status === 'patched') s.status = 'not-installed'
  }
}

// The corrected sendMessages, remembering each producer it serves.
function remembering (s, createSendMessages, dir) {
  return function (options) {
    s.loggers.add(options.logger)
    return createSendMessages({ ...options, eosManager: unpoisoned(options.eosManager, dir) })
  }
}

// kafkajs's idempotent producer keeps a lock per broker in a plain object,
// made on first use as `locks[nodeId] || new Lock()`: while
// Object.prototype[nodeId] is set (a moment's pollution), that value is
// stored as the lock, and every later request to the broker fails on it for
// good. Only a fresh producer id makes the locks (and sequences) anew: the
// attempt fails as retriable, and the next one asks for it before it takes
// any lock, once every request of this one has settled (kafkajs's own would
// otherwise release a lock that is gone), so that the first send after the
// pollution is gone succeeds.
function unpoisoned (eosManager, dir) {
  const guarded = Object.create(eosManager)
  let poisoned = false
  let renewal = null
  guarded.acquireBrokerLock = async function (broker) {
    if (poisoned) {
      poisoned = false
      renewal = eosManager.initProducerId().finally(() => { renewal = null })
    }
    if (renewal !== null) await renewal
    try {
      return await eosManager.acquireBrokerLock(broker)
    } catch (error) {
      if (!(error instanceof TypeError) || !eosManager.isInitialized() || eosManager.isTransactional()) throw error
      poisoned = true
      const { KafkaJSError } = require(path.join(dir, 'src', 'errors'))
      throw new KafkaJSError(error, { retriable: true, cause: error })
    }
  }
  return guarded
}

// wrapProducer()'s check: whether the producer was made by a corrected
// kafkajs. One that was not keeps the retry that can acknowledge unwritten
// messages of a call spanning brokers, so wrapProducer() never merges calls
// for it; said once, unless the operator turned the patch off.
function checkProducer (producer) {
  const s = state()
  kafkajsPatchStatus()
  let logger
  try {
    logger = producer.logger()
  } catch {}
  if (s.loggers.has(logger)) return true
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
      const m = moduleAt(filename)
      m._compile(fs.readFileSync(filename, 'utf8'), filename)
      exports = m.exports
    }
    return exports(...args)
  }
}

// A module for `filename` that requires relative to it, as Node's loader makes.
function moduleAt (filename) {
  const m = new Module(filename, null)
  m.filename = filename
  m.paths = Module._nodeModulePaths(path.dirname(filename))
  return m
}

// A module's exports as the plain data property Node's loader makes.
function setExports (m, value) {
  Object.defineProperty(m, 'exports', { value, writable: true, enumerable: true, configurable: true })
  return value
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

module.exports = { installKafkajsPatch, checkProducer, applyKafkajsPatch, ensureKafkajsPatch, turnOffKafkajsPatch, kafkajsPatchStatus, groupMessagesPerPartition, createSendMessagesFactory, unpoisoned, kOutcome, kPerRecord, NO_PARTITION, PARTITIONER_THREW, KNOWN }
