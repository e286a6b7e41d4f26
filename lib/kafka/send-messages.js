'use strict'

// kafkajs 2.2.x's src/producer/sendMessages.js, corrected (kafkajs-patch.js
// says what it fixes and puts it in place): loaded when kafkajs's producer
// first requires sendMessages, not at install().
const path = require('node:path')
const { createReadBack } = require('./read-back')

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
// A partition's retriable answer that says the broker appended nothing
// (unlike NOT_ENOUGH_REPLICAS_AFTER_APPEND or REQUEST_TIMED_OUT): a message
// only ever answered so was not written.
const NOT_APPENDED = new Set(['NOT_ENOUGH_REPLICAS', 'NOT_LEADER_FOR_PARTITION', 'LEADER_NOT_AVAILABLE', 'UNKNOWN_TOPIC_OR_PARTITION', 'FENCED_LEADER_EPOCH', 'UNKNOWN_LEADER_EPOCH'])
// On a messages array of wrapProducer()'s (one per topic of a request): each
// message carries its own caller, so one message's fate is never the
// call's. A topic the cluster refuses, a partitioner that throws, or a
// partition the topic does not have then fails only its own messages, and
// the call resolves with the outcome (kOutcome) that says which. kafkajs's
// own callers keep its all-or-nothing call.
const kPerRecord = Symbol.for('io-hygiene.kafkajs.per-record.v1')
// On such an array: a Set of the topic's partitions whose earlier records
// wait to be sent again (the Java producer's muted partitions). A message the
// partitioner puts in one is not sent: `assigned` says its partition, no
// answer covers it, and it goes later, behind them.
const kMuted = Symbol.for('io-hygiene.kafkajs.muted.v1')
// A message's partition in kOutcome's `assigned` when it has none: the
// partitioner named no partition of the topic, or threw (`thrown` has why).
const NO_PARTITION = -1
const PARTITIONER_THREW = -2
const asIs = async (data) => data
const NOTHING = new Map()

// The topic's partitions by id: null for each the metadata has (its batch
// once a message goes to it), 0 for an id it lacks. Ids are 0 to n - 1; one
// past what an array should hold is left out (no message can go to it).
const MAX_PARTITION_ID = 1_000_000
function partitionLists (partitionMetadata) {
  let last = -1
  for (let i = 0; i < partitionMetadata.length; i++) {
    const id = partitionMetadata[i].partitionId
    if (Number.isInteger(id) && id > last && id <= MAX_PARTITION_ID) last = id
  }
  const lists = new Array(last + 1).fill(0)
  for (let i = 0; i < partitionMetadata.length; i++) {
    const id = partitionMetadata[i].partitionId
    if (Number.isInteger(id) && id >= 0 && id <= last) lists[id] = null
  }
  return lists
}

// `confirmWaitMs`: how long a batch that may be written is looked for
// (read-back.js), for tests.
function createSendMessagesFactory (dir, { confirmWaitMs } = {}) {
  const internal = (file) => require(path.join(dir, 'src', file))
  return function createSendMessages ({ logger, cluster, partitioner, eosManager, retrier }) {
    const { KafkaJSMetadataNotLoaded, KafkaJSError } = internal('errors')
    const { staleMetadata, createErrorFromCode } = internal('protocol/error')
    const apiKeys = internal('protocol/requests/apiKeys')
    const { requests } = internal('protocol/requests')
    const { placed, confirm, readBack } = createReadBack(cluster, confirmWaitMs)

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
    // kafkajs retries it. (A wrapped call is one attempt: nothing is refused
    // yet when it asks.)
    async function addTopics (topics, perRecord, refusedTopics) {
      if (!perRecord) return cluster.addMultipleTargetTopics(topics)
      try {
        await cluster.addMultipleTargetTopics(topics)
      } catch (error) {
        if (!TOPIC_REFUSED.has(error?.type)) throw error
        if (topics.length === 1) {
          refuseTopic(topics[0], error, refusedTopics)
          return
        }
        for (const topic of topics) {
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
        const muted = messages[kMuted]
        // Each partition of the metadata's batch by its id, in an array made
        // before the loop (filled: no hole reads through the prototype), so
        // that the loop around the partitioner does no lookup by key: the
        // event loop is held for the whole of it. 0: no such partition.
        const perPartition = partitionLists(partitionMetadata)
        const last = perPartition.length - 1
        const partitions = new Array(messages.length)
        const position = new Array(messages.length)
        for (let i = 0; i < messages.length; i++) {
          const message = messages[i]
          let partition
          try {
            partition = partitioner({ topic, partitionMetadata, message })
          } catch (error) {
            if (!perRecord) throw error
            thrown ??= new Map()
            thrown.set(message, error)
            partitions[i] = PARTITIONER_THREW
            continue
          }
          // As kafkajs reads its grouping's keys back: a number.
          if (typeof partition !== 'number') partition = Number(partition)
          let list = (partition >>> 0) === partition && partition <= last ? perPartition[partition] : 0
          // kafkajs sends a partition its metadata does not have nowhere,
          // and resolves: its messages are never written.
          if (list === 0) {
            partitions[i] = NO_PARTITION
            continue
          }
          partitions[i] = partition
          if (muted !== undefined && muted.has(partition)) continue
          if (list === null) perPartition[partition] = list = []
          position[i] = list.length
          list.push(message)
        }
        for (let partition = 0; partition <= last; partition++) {
          const list = perPartition[partition]
          if (list !== 0 && list !== null) pending.set(`${topic}\0${partition}`, { topic, partition, messages: list, maybeAt: null })
        }
        assigned.set(messages, partitions)
        positions.set(messages, position)
      }
      return { pending, assigned, positions, thrown }
    }

    // What is still to send, by the node leading each partition now. A
    // partition without a leader (an election under way) or missing from
    // the metadata waits for the next attempt.
    function perLeader (pending, held) {
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
        for (const entry of entries) {
          if (held.has(entry)) continue
          const { partition, messages } = entry
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

    // "topic\0partition" -> the read-back (read-back.js) of each batch still
    // to send that may be in the log, started now, or null.
    function readBacks (pending) {
      let out = null
      for (const [key, entry] of pending) if (entry.maybeAt !== null) (out ??= new Map()).set(key, readBack(entry, entry.maybeAt))
      return out
    }

    // One broker's part of an attempt. The broker answers each partition on
    // its own: one written is done (never sent again); one refused goes to
    // `refusals`, its sequence numbers given back (the broker wrote none of
    // its batch, so the next batch of that partition reuses them).
    async function produce (broker, topicData, request, pending, results, refusals) {
      await eosManager.acquireBrokerLock(broker)
      try {
        if (eosManager.isTransactional()) await eosManager.addPartitionsToTransaction(topicData)
        let sent = 0
        for (const { topic, partitions } of topicData) {
          for (const entry of partitions) {
            entry.firstSequence = eosManager.getSequence(topic, entry.partition)
            eosManager.updateSequence(topic, entry.partition, entry.messages.length)
            sent++
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
        let answered = 0
        for (const { topicName, partitions } of response.topics) {
          for (const answer of partitions) {
            const key = `${topicName}\0${answer.partition}`
            const entry = pending.get(key)
            if (entry === undefined) continue
            answered++
            const code = answer.errorCode
            if (code === 0 || code === undefined || code === DUPLICATE_SEQUENCE_NUMBER) {
              pending.delete(key)
              results.push({ topicName, ...answer })
            } else {
              eosManager.updateSequence(topicName, answer.partition, -entry.messages.length)
              refusals.push({ key, error: createErrorFromCode(code), baseOffset: answer.baseOffset })
            }
          }
        }
        if (answered < sent) giveBackUnanswered(topicData, response, eosManager)
      } finally {
        await eosManager.releaseBrokerLock(broker)
      }
    }

    // A partition the answer leaves out may have been written: its batch
    // goes again with the same sequence numbers, as after no answer at all.
    function giveBackUnanswered (topicData, response, eosManager) {
      const answered = new Set()
      for (const { topicName, partitions } of response.topics) for (const { partition } of partitions) answered.add(`${topicName}\0${partition}`)
      for (const { topic, partitions } of topicData) {
        for (const entry of partitions) if (!answered.has(`${topic}\0${entry.partition}`)) eosManager.updateSequence(topic, entry.partition, -entry.messages.length)
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
      // The keys the last attempt's answers refused with nothing appended.
      const declined = new Set()
      const topics = topicMessages.map(({ topic }) => topic)
      let perRecord = false
      for (const { messages } of topicMessages) if (messages?.[kPerRecord] === true) perRecord = true
      // For wrapProducer()'s calls, an attempt that settled some partitions
      // and must retry others ends the call: its callers' fates are known
      // now, and the wrapper sends the rest again alone (`retry` says why).
      let retry = null
      // Whether the producer asks the cluster to create a topic it does not
      // know (kafkajs's allowAutoTopicCreation): if not, such a topic is
      // refused at once.
      const autoCreate = cluster.brokerPool?.seedBroker?.allowAutoTopicCreation !== false
      const outcome = () => {
        if (call !== null) return { assigned: call.assigned, positions: call.positions, pending: call.pending, entries: results, refused, topics: refusedTopics, thrown: call.thrown, retry, declined, autoCreate, maybeAt: perRecord ? readBacks(call.pending) : null }
        // An attempt that ended before any message had a partition sent
        // nothing; the topics the cluster refused are known.
        return perRecord && retry !== null ? { assigned: NOTHING, pending: NOTHING, entries: results, refused, topics: refusedTopics, retry, autoCreate, unsent: true } : null
      }
      try {
        await retrier(async (bail, retryCount, retryTime) => {
          if (!perRecord) await addTopics(topics, perRecord, refusedTopics)
          let failure = null
          let uncovered = null
          declined.clear()
          // wrapProducer()'s calls are one attempt each: its batcher sends
          // what is left again after a backoff, while the rest of its queue
          // goes on (kafkajs's retries here would hold the whole producer).
          const later = (e) => {
            if (!perRecord) throw e
            retry = e
          }
          try {
            if (perRecord) await addTopics(topics, perRecord, refusedTopics)
            call ??= await assign(topicMessages, refusedTopics)
            const { pending } = call
            const held = hasMaybeAt(pending) ? await confirm(pending, results) : NONE_HELD
            const { perNode, leaderless } = perLeader(pending, held)
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
            for (const { key, error, baseOffset } of refusals) {
              if (SEQUENCE_LOST.has(error.type) || (error.retriable && !RECORD_REFUSED.has(error.type))) {
                failure ??= error
                // Refused with nothing appended (no offset): as good as not sent.
                if (NOT_APPENDED.has(error.type) && !(Number(baseOffset) >= 0)) declined.add(key)
                // Appended, then not confirmed: looked for before it goes
                // again (read-back.js). An idempotent producer's sequence
                // numbers already make the broker drop a copy it holds.
                const offset = Number(baseOffset)
                const entry = pending.get(key)
                if (offset >= 0 && Number.isSafeInteger(offset + entry.messages.length) && !eosManager.isInitialized()) entry.maybeAt = placed(offset)
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
                : held.size > 0
                  ? 'A partition batch its leader may have written is not visible there yet'
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

const NONE_HELD = new Set()

function hasMaybeAt (pending) {
  for (const entry of pending.values()) if (entry.maybeAt !== null) return true
  return false
}

module.exports = { createSendMessagesFactory, kOutcome, kPerRecord, kMuted, NO_PARTITION, PARTITIONER_THREW }
