'use strict'

// Sends flow through a producer while a cluster's leaders move, then the topic
// is read back and compared with what each send() said. Shared by
// test/kafka-cluster.test.js and bench/kafka.js (the leader-move scenario).
const crypto = require('node:crypto')
const { setTimeout: sleep } = require('node:timers/promises')
const { consumeAll } = require('./kafka-broker')

const PARTITIONS = 6

async function createTopic (kafka, prefix) {
  const topic = `${prefix}-${crypto.randomUUID().slice(0, 8)}`
  const admin = kafka.admin()
  await admin.connect()
  try {
    // kafkajs's createTopics() then polls a node's metadata, and fails when
    // the node has not heard of the topic yet (UNKNOWN_TOPIC_OR_PARTITION,
    // which it does not retry): asked here instead until every partition
    // has a leader (bounded).
    await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS, replicationFactor: 3 }] }).catch((error) => {
      if (error.type !== 'UNKNOWN_TOPIC_OR_PARTITION') throw error
    })
    for (let attempt = 0; ; attempt++) {
      try {
        const { topics } = await admin.fetchTopicMetadata({ topics: [topic] })
        if (topics[0].partitions.length === PARTITIONS && topics[0].partitions.every((p) => p.leader >= 0)) break
      } catch (error) {
        if (attempt >= 100) throw error
      }
      if (attempt >= 100) throw new Error(`topic ${topic} has no leaders after ${attempt} attempts`)
      await sleep(100)
    }
  } finally {
    await admin.disconnect()
  }
  return topic
}

// The node leading most of the topic's partitions.
async function busiestLeader (kafka, cluster, topic) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    const { topics } = await admin.fetchTopicMetadata({ topics: [topic] })
    const count = new Map()
    for (const p of topics[0].partitions) count.set(p.leader, (count.get(p.leader) ?? 0) + 1)
    const [nodeId] = [...count].sort((a, b) => b[1] - a[1])[0]
    return cluster.nodes.find((n) => n.nodeId === nodeId) ?? cluster.nodes[0]
  } finally {
    await admin.disconnect()
  }
}

// How leaders move: 'restart' (the busiest leader stopped and started),
// 'rolling' (every node in turn), 'elect' (a node stopped and started, then
// the preferred leaders elected back while sends flow).
const MOVES = {
  async restart (kafka, cluster, topic) {
    await (await busiestLeader(kafka, cluster, topic)).restart()
  },
  async rolling (kafka, cluster, topic) {
    const first = await busiestLeader(kafka, cluster, topic)
    for (const node of [first, ...cluster.nodes.filter((n) => n !== first)]) await node.restart()
  },
  async elect (kafka, cluster, topic) {
    await (await busiestLeader(kafka, cluster, topic)).restart()
    await sleep(1000)
    await cluster.electPreferredLeaders(topic)
  },
  // The issue's sequence: every node in turn, busiest leader first, then the
  // preferred leaders elected back.
  async 'rolling-elect' (kafka, cluster, topic) {
    await MOVES.rolling(kafka, cluster, topic)
    await sleep(1000)
    await cluster.electPreferredLeaders(topic)
  },
}

// Right after a move a node may still answer for leaders it lost
// (NOT_LEADER_FOR_PARTITION to kafkajs's admin, which does not retry that):
// read again, a bounded number of times.
async function readBack (kafka, topic, count) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await consumeAll(kafka, topic, count, { timeoutMs: 60_000 })
    } catch (error) {
      if (attempt >= 10 || error.retriable !== true) throw error
      await sleep(500)
    }
  }
}

// `producer` has kafkajs's send(); `callers` awaiting senders send one
// message each at a time until `moveLeaders(topic)` is over and `after` more
// went out (at most `max` in all). Returns the counts of the issue's table.
// Paced (each caller waits `paceMs` between sends, about callers * 1000 /
// paceMs messages a second), so that the stream lasts as long as the move.
async function leaderMove ({ producer, ...options }) {
  return (await leaderMoveAll({ producers: [producer], ...options }))[0]
}

// The same for several producers at once, each on its own topic, through one
// move of the leaders (of the first one's topic; every topic has a partition
// on every node): one move serves them all. Returns their counts in order.
async function leaderMoveAll ({ kafka, producers, moveLeaders, callers = 100, after = 2000, max = 100_000, paceMs = 100 }) {
  const flows = []
  for (const producer of producers) {
    const flow = { producer, topic: await createTopic(kafka, 'move'), resolved: new Set(), rejected: new Map(), next: 0, endAt: max, senders: null }
    const sender = async () => {
      while (flow.next < flow.endAt) {
        const n = flow.next++
        try {
          await producer.send({ topic: flow.topic, messages: [{ key: `k${n % 97}`, value: String(n) }] })
          flow.resolved.add(n)
        } catch (error) {
          flow.rejected.set(n, { by: error.code ?? error.type ?? error.name, written: error.written })
        }
        if (paceMs > 0) await sleep(paceMs)
      }
    }
    flows.push(flow)
    flow.senders = Promise.all(Array.from({ length: callers }, sender))
  }
  // Leaders move once every stream is running.
  const warming = () => flows.some((f) => f.resolved.size < 1000 && f.next < f.endAt)
  while (warming()) await sleep(50)
  const started = Date.now()
  await moveLeaders(flows[0].topic)
  const moveMs = Date.now() - started
  for (const flow of flows) flow.endAt = Math.min(max, flow.next + after)
  await Promise.all(flows.map((f) => f.senders))
  return Promise.all(flows.map((flow) => count(kafka, flow, moveMs)))
}

// Reads a flow's topic back and compares it with what each send() said.
async function count (kafka, { topic, resolved, rejected, next: sent }, moveMs) {
  const consumed = await readBack(kafka, topic, resolved.size)
  const seen = new Map() // value -> times
  const perPartition = new Map()
  for (const m of consumed) {
    const n = Number(m.value)
    seen.set(n, (seen.get(n) ?? 0) + 1)
    let list = perPartition.get(m.partition)
    if (list === undefined) perPartition.set(m.partition, (list = []))
    list.push(m)
  }
  let duplicated = 0
  for (const times of seen.values()) if (times > 1) duplicated += times - 1
  // Call order per partition: each message's first copy after the previous
  // one's (a key's messages go to one partition in call order).
  let outOfOrder = 0
  for (const list of perPartition.values()) {
    list.sort((a, b) => a.offset - b.offset)
    const first = new Set()
    let last = -1
    for (const m of list) {
      const n = Number(m.value)
      if (first.has(n)) continue
      first.add(n)
      if (n < last) outOfOrder++
      last = Math.max(last, n)
    }
  }
  let ackedNotInTopic = 0
  for (const n of resolved) if (!seen.has(n)) ackedNotInTopic++
  let lost = 0
  for (let n = 0; n < sent; n++) if (!seen.has(n) && !rejected.has(n)) lost++
  let rejectedWritten = 0
  // Rejected saying `written: false`, yet in the topic: a rejection that lied.
  let rejectedNotWrittenInTopic = 0
  for (const [n, { written }] of rejected) {
    if (!seen.has(n)) continue
    rejectedWritten++
    if (written === false) rejectedNotWrittenInTopic++
  }
  return {
    moveMs,
    sent,
    resolved: resolved.size,
    rejected: rejected.size,
    rejectedWritten,
    rejectedNotWrittenInTopic,
    rejectedBy: [...new Set(Array.from(rejected.values(), (r) => r.by))],
    lost,
    duplicated,
    outOfOrder,
    ackedNotInTopic,
  }
}

// Until every partition of `topic` has all its replicas in sync (bounded).
async function waitInSync (kafka, topic, { attempts = 600 } = {}) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        const { topics } = await admin.fetchTopicMetadata({ topics: [topic] })
        if (topics[0].partitions.every((p) => p.leader >= 0 && p.isr.length === p.replicas.length)) return
      } catch (error) {
        if (attempt >= attempts) throw error
      }
      if (attempt >= attempts) throw new Error(`${topic} not back in sync after ${attempt} attempts`)
      await sleep(250)
    }
  } finally {
    await admin.disconnect()
  }
}

// A partition's leaders move as a cluster's nodes stop for a while: the node
// leading most of `topic`'s partitions stopped (SIGTERM, a controlled
// shutdown) and started again `downMs` later; then each other node restarted
// in turn once the topic is back in sync; then the preferred leaders
// elected back.
async function outage (kafka, cluster, topic, { downMs = 10_000 } = {}) {
  const first = await busiestLeader(kafka, cluster, topic)
  await first.stop()
  await sleep(downMs)
  await first.start()
  for (const node of cluster.nodes.filter((n) => n !== first)) {
    await waitInSync(kafka, topic)
    await node.restart()
  }
  await waitInSync(kafka, topic)
  await cluster.electPreferredLeaders(topic)
}

// Keyed messages of about `bytes` bytes over `keys` keys: `callers` loops per
// producer, each awaiting one send() of one message at a time (`paceMs`
// between them), from the start; `outage()` begins `moveAfterMs` later, and
// the loops stop `afterMs` after it ended (at most `max` messages per
// producer). Each producer has a topic of its own. Then every topic is read
// back whole and compared with what each send() said; returns, per producer:
// ackedNotInTopic (resolved, not in the topic), wrongMetadata (resolved with
// RecordMetadata other than the one partition it is in), duplicated, outOfOrder
// (a key's first copies not in call order), rejected, rejectedEarly (before
// `deliveryTimeoutMs`), rejectedNotWrittenInTopic, lost.
async function outageAll ({ kafka, cluster, producers, callers = 200, paceMs = 100, keys = 600, bytes = 100, moveAfterMs = 4000, afterMs = 3000, max = 100_000, deliveryTimeoutMs = 120_000, downMs }) {
  const flows = []
  for (const producer of producers) {
    const flow = { topic: await createTopic(kafka, 'outage'), sent: 0, calls: [], endAt: max }
    const sender = async () => {
      while (flow.sent < flow.endAt) {
        const n = flow.sent++
        const key = `key-${n % keys}`
        const call = { key, at: Date.now(), metadata: null, error: null, settledAt: 0 }
        flow.calls[n] = call
        try {
          call.metadata = await producer.send({ topic: flow.topic, messages: [{ key, value: String(n).padStart(bytes - key.length, '0') }] })
        } catch (error) {
          call.error = { by: error.code ?? error.type ?? error.name, cause: error.cause?.type ?? error.cause?.name, written: error.written }
        }
        call.settledAt = Date.now()
        if (paceMs > 0) await sleep(paceMs)
      }
    }
    flows.push(flow)
    flow.senders = Promise.all(Array.from({ length: callers }, sender))
  }
  await sleep(moveAfterMs)
  const started = Date.now()
  await outage(kafka, cluster, flows[0].topic, { downMs })
  const moveMs = Date.now() - started
  await sleep(afterMs)
  for (const flow of flows) flow.endAt = Math.min(max, flow.sent)
  await Promise.all(flows.map((f) => f.senders))
  const out = []
  for (const flow of flows) out.push(await outageCount(kafka, flow, moveMs, deliveryTimeoutMs))
  return out
}

async function outageCount (kafka, { topic, sent, calls }, moveMs, deliveryTimeoutMs) {
  const resolved = calls.filter((c) => c.metadata !== null).length
  const consumed = await readBack(kafka, topic, resolved)
  const copies = new Map() // n -> partitions it is in, one per copy
  const perPartition = new Map()
  for (const m of consumed) {
    const n = Number(m.value)
    let list = copies.get(n)
    if (list === undefined) copies.set(n, (list = []))
    list.push(m.partition)
    let own = perPartition.get(m.partition)
    if (own === undefined) perPartition.set(m.partition, (own = []))
    own.push(m)
  }
  let duplicated = 0
  for (const list of copies.values()) duplicated += list.length - 1
  // A key's messages, in the order of their first copies in its partition.
  let outOfOrder = 0
  const lastOfKey = new Map()
  for (const list of perPartition.values()) {
    list.sort((a, b) => a.offset - b.offset)
    const first = new Set()
    for (const m of list) {
      const n = Number(m.value)
      if (first.has(n)) continue
      first.add(n)
      if (n < (lastOfKey.get(m.key) ?? -1)) outOfOrder++
      lastOfKey.set(m.key, Math.max(n, lastOfKey.get(m.key) ?? -1))
    }
  }
  let ackedNotInTopic = 0
  let wrongMetadata = 0
  let rejected = 0
  let rejectedEarly = 0
  let rejectedWritten = 0
  let rejectedNotWrittenInTopic = 0
  let lost = 0
  const rejectedBy = new Set()
  // Rejections per code (and cause), for a reader who compares clients.
  const rejectedByCode = {}
  const falseAcks = []
  for (let n = 0; n < sent; n++) {
    const call = calls[n]
    const partitions = copies.get(n)
    if (call.metadata !== null) {
      if (partitions === undefined) {
        ackedNotInTopic++
        if (falseAcks.length < 5) falseAcks.push({ n, key: call.key, afterMs: call.settledAt - call.at, metadata: call.metadata.map((e) => e.partition) })
      } else if (call.metadata.length !== 1 || call.metadata[0].partition !== partitions[0]) {
        // One message: kafkajs resolves with its partition's entry alone.
        wrongMetadata++
      }
    } else if (call.error !== null) {
      rejected++
      const code = `${call.error.by}${call.error.cause ? `/${call.error.cause}` : ''}`
      rejectedBy.add(code)
      rejectedByCode[code] = (rejectedByCode[code] ?? 0) + 1
      if (call.settledAt - call.at < deliveryTimeoutMs) rejectedEarly++
      if (partitions !== undefined) {
        rejectedWritten++
        if (call.error.written === false) rejectedNotWrittenInTopic++
      }
    } else if (partitions === undefined) {
      lost++
    }
  }
  return { moveMs, sent, resolved, rejected, rejectedEarly, rejectedWritten, rejectedNotWrittenInTopic, rejectedBy: [...rejectedBy], rejectedByCode, lost, duplicated, outOfOrder, ackedNotInTopic, wrongMetadata, falseAcks }
}

module.exports = { leaderMove, leaderMoveAll, outageAll, outage, outageCount, waitInSync, createTopic, MOVES, PARTITIONS }
