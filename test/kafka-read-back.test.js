'use strict'

// A default producer's partition batch that its leader appended, then
// answered with a retriable error, is read back at its offset before it goes
// again (lib/kafka/read-back.js): in the background, so that only that
// partition's later records wait for the answer, while the producer's other
// partitions are written meanwhile. On kafkajs's internals with the brokers'
// answers scripted (helpers/scripted-kafka.js); on three real nodes with a
// follower stopped: kafka-cluster.test.js.
const t = require('tap')
const { AsyncLocalStorage } = require('node:async_hooks')
const { execFile } = require('node:child_process')
const path = require('node:path')
const { scripted, wrapped, dir } = require('./helpers/scripted-kafka')
const { createSendMessagesFactory } = require('../lib/kafka/send-messages')

const NOT_LEADER = 6
const byKey = ({ message }) => Number(message.key)
// The first request: partition 1's batch appended at offset 40, then its
// leader answered that it no longer leads.
const appendedThenMoved = (broker, _, call) => call === 1 ? { errors: { 1: NOT_LEADER }, appended: { 1: '40' } } : undefined
const sentTo = (s, partition) => s.log.filter(([, p]) => p === partition).map(([, , , values]) => values)

// A record as kafkajs's fetch() decodes it.
function record (offset, value, key) {
  return { offset: String(offset), key: Buffer.from(key), value: Buffer.from(value), headers: {}, timestamp: '1600000000000', isControlRecord: false }
}

// A read-back whose answer the test releases: `started` once the broker is
// asked, `records` the answer.
function gatedRead (t, records) {
  let release
  let started
  const gate = {
    released: false,
    reads: 0,
    started: new Promise((resolve) => { started = resolve }),
    release: () => {
      gate.released = true
      release()
    },
  }
  const opened = new Promise((resolve) => { release = resolve })
  // Before the read-back left the request slot, it held the producer until
  // it was answered: released anyway after a while, so that such a
  // producer fails the assertions below instead of hanging the test.
  const fallback = setTimeout(() => gate.release(), 5000)
  t.teardown(() => {
    clearTimeout(fallback)
    release()
  })
  gate.read = async () => {
    gate.reads++
    started()
    await opened
    return records
  }
  return gate
}

t.test('while one partition\'s batch is read back, the producer\'s other partitions are written; its own later records wait, and it is not written twice', async (t) => {
  const gate = gatedRead(t, [record(40, '1-a', '1')])
  const s = scripted({ leaders: [1, 1], script: appendedThenMoved, read: gate.read })
  const producer = wrapped(s, { partitioner: byKey })
  t.teardown(() => producer.disconnect())
  const als = new AsyncLocalStorage()
  const first = als.run('first caller', () => producer.send({ topic: 't', messages: [{ key: '1', value: '1-a' }] }).then((r) => [r, als.getStore()]))
  const mate = producer.send({ topic: 't', messages: [{ key: '0', value: '0-a' }] })
  await gate.started

  // The read-back waits for its answer meanwhile.
  const other = producer.send({ topic: 't', messages: [{ key: '0', value: '0-b' }] })
  const behind = producer.send({ topic: 't', messages: [{ key: '1', value: '1-b' }] })
  const [written] = await other
  t.notOk(gate.released, 'another partition\'s send is written and resolves while the read-back waits')
  t.equal(written.partition, 0)
  t.same(sentTo(s, 1), [['1-a']], 'the partition read back takes nothing meanwhile: its later record waits')
  const [ofMate] = await mate
  t.same([ofMate.partition, ofMate.baseOffset], [0, '0'], 'its batch-mate on the other partition resolved')

  gate.release()
  const [[found], store] = await first
  t.same([found.partition, found.baseOffset], [1, '40'], 'found where its leader appended it: resolves with that offset')
  t.equal(store, 'first caller', 'in its caller\'s own async context')
  const [later] = await behind
  t.equal(later.partition, 1)
  t.same(sentTo(s, 1), [['1-a'], ['1-b']], 'not written twice, and the partition\'s later record goes after it, in call order')
  t.equal(gate.reads, 1, 'read back once')
})

t.test('a batch not found where its leader appended it is sent again, before the partition\'s later records; one not seen within the wait too', async (t) => {
  const gate = gatedRead(t, [record(40, 'another producer\'s', '1')])
  const s = scripted({ leaders: [1, 1], script: appendedThenMoved, read: gate.read })
  const producer = wrapped(s, { partitioner: byKey })
  t.teardown(() => producer.disconnect())
  const first = producer.send({ topic: 't', messages: [{ key: '1', value: '1-a' }] })
  await gate.started
  const behind = producer.send({ topic: 't', messages: [{ key: '1', value: '1-b' }] })
  const other = await producer.send({ topic: 't', messages: [{ key: '0', value: '0-b' }] })
  t.notOk(gate.released, 'another partition written meanwhile')
  t.equal(other[0].partition, 0)
  gate.release()
  await Promise.all([first, behind])
  t.same(sentTo(s, 1), [['1-a'], ['1-a'], ['1-b']], 'sent again, then the later record')

  // Never visible: read back until the wait is over, then sent again.
  const never = scripted({ leaders: [1, 1], script: appendedThenMoved, read: async () => [] })
  const quick = createSendMessagesFactory(dir, { confirmWaitMs: 30 })
  const wrappedNever = wrapped(never, { partitioner: byKey, factory: quick })
  t.teardown(() => wrappedNever.disconnect())
  const [meta] = await wrappedNever.send({ topic: 't', messages: [{ key: '1', value: '1-a' }] })
  t.equal(meta.partition, 1, 'resolves once sent again')
  t.same(sentTo(never, 1), [['1-a'], ['1-a']], 'sent again once the wait is over')
  t.ok(never.brokers.get(1).reads.length >= 1, 'looked for until then')
})

t.test('a read-back that fails, or sees part of the batch, reads again with fresh metadata: found, the batch is not sent twice', async (t) => {
  const batch = [record(40, '1-a', '1'), record(41, '1-b', '1')]
  const reads = [
    ['a failed read', (broker) => { if (broker.reads.length === 1) throw new Error('connection closed'); return batch }],
    ['part of it visible', (broker) => broker.reads.length === 1 ? batch.slice(0, 1) : batch],
  ]
  for (const [name, read] of reads) {
    const s = scripted({ leaders: [1, 1], script: appendedThenMoved, read })
    const producer = wrapped(s, { partitioner: byKey })
    t.teardown(() => producer.disconnect())
    const results = await Promise.all(['1-a', '1-b'].map((value) => producer.send({ topic: 't', messages: [{ key: '1', value }] })))
    t.same(results.map(([e]) => e.baseOffset), ['40', '41'], `${name}: each caller its own record's offset`)
    t.same(sentTo(s, 1), [['1-a', '1-b']], `${name}: not sent twice`)
    t.equal(s.brokers.get(1).reads.length, 2, `${name}: read again`)
    t.ok(s.cluster.refreshes > 0, `${name}: with fresh metadata`)
  }
})

t.test('flush() waits for a batch being read back; close() past its timeout rejects it, coded and counted', async (t) => {
  const gate = gatedRead(t, [record(40, '1-a', '1')])
  const s = scripted({ leaders: [1, 1], script: appendedThenMoved, read: gate.read })
  const producer = wrapped(s, { partitioner: byKey })
  const first = producer.send({ topic: 't', messages: [{ key: '1', value: '1-a' }] })
  await gate.started
  let flushed = false
  const flushing = producer.flush().then(() => { flushed = true })
  await producer.send({ topic: 't', messages: [{ key: '0', value: '0-b' }] })
  t.notOk(flushed, 'flush() still waits while the read-back does')
  gate.release()
  await flushing
  t.same((await first)[0].baseOffset, '40', 'then the caller resolves, found')

  // Never answered: close() with a timeout rejects the caller that waits.
  const stalled = gatedRead(t, [])
  const s2 = scripted({ leaders: [1, 1], script: appendedThenMoved, read: stalled.read })
  const closing = wrapped(s2, { partitioner: byKey })
  const pending = closing.send({ topic: 't', messages: [{ key: '1', value: '1-a' }] }).catch((e) => e)
  await stalled.started
  await t.rejects(closing.disconnect({ timeoutMs: 20 }), { code: 'ERR_IO_HYGIENE_TIMEOUT' })
  const error = await pending
  t.equal(error.code, 'ERR_IO_HYGIENE_TIMEOUT', 'the caller rejects, coded')
  t.equal(error.written, 'unknown', 'and may have been written')
  t.equal(closing.stats().rejected, 1, 'counted as rejected')
  t.same(sentTo(s2, 1), [['1-a']], 'not sent again')

  // Disconnected: the read-back reads no more (kafkajs would connect again).
  let stopped
  const stop = new Promise((resolve) => { stopped = resolve })
  s2.cluster.isConnected = () => {
    stopped()
    return false
  }
  stalled.release()
  await stop
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(s2.brokers.get(1).reads.length, 1, 'once the producer is disconnected, not read again')
})

t.test('a message whose deadline comes while its batch is read back rejects then, saying it may have been written', async (t) => {
  const gate = gatedRead(t, [])
  const s = scripted({ leaders: [1, 1], script: appendedThenMoved, read: gate.read })
  const producer = wrapped(s, { partitioner: byKey, wrap: { deliveryTimeoutMs: 200 } })
  t.teardown(() => producer.disconnect())
  const error = await producer.send({ topic: 't', messages: [{ key: '1', value: '1-a' }] }).catch((e) => e)
  t.equal(error.code, 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT', 'rejected at its deadline, coded')
  t.equal(error.written, 'unknown')
  t.notOk(gate.released, 'while the read-back still waited')
  t.same(sentTo(s, 1), [['1-a']], 'not sent again')
})

t.test('an answer that comes while the batch\'s other messages are being sent is not waited for until the end of the wait', { timeout: 30000 }, async (t) => {
  // The first request: partition 1 appended, then refused (read back);
  // partition 0 refused with nothing appended (sent again). The read-back's
  // answer comes while partition 0's second request is out.
  const gate = gatedRead(t, [record(40, '1-a', '1')])
  const script = async (broker, _, call) => {
    if (call === 1) return { errors: { 0: 19, 1: NOT_LEADER }, appended: { 1: '40' } }
    if (call === 2) {
      gate.release()
      await new Promise((resolve) => setImmediate(resolve))
    }
  }
  const s = scripted({ leaders: [1, 1], script, read: gate.read })
  // A wait longer than the test's own timeout: only the answer ends it.
  const factory = createSendMessagesFactory(dir, { confirmWaitMs: 60_000 })
  const producer = wrapped(s, { partitioner: byKey, factory })
  t.teardown(() => producer.disconnect())
  const [[one], [zero]] = await Promise.all(['1', '0'].map((key) => producer.send({ topic: 't', messages: [{ key, value: `${key}-a` }] })))
  t.same([one.partition, one.baseOffset], [1, '40'], 'found, once its answer came')
  t.equal(zero.partition, 0)
  t.same(sentTo(s, 1), [['1-a']], 'not sent twice')
})

t.test('a read-back still looking keeps no process open once its callers are answered', async (t) => {
  const fixture = path.join(__dirname, 'fixtures', 'kafka-read-back-exit.js')
  const { code, stdout, stderr } = await new Promise((resolve) => {
    execFile(process.execPath, [fixture], { timeout: 60_000 }, (err, stdout, stderr) => resolve({ code: err?.code ?? 0, stdout: stdout.trim(), stderr }))
  })
  t.equal(stdout, 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT read', 'its caller rejected at its deadline while the read-back looked')
  t.equal(code, 0, `the process exited by itself ${stderr}`)
})
