'use strict'

// lib/kafka/kafkajs-patch.js: the linear grouping gives kafkajs's result; the
// patch goes in only before kafkajs's producer loads and only on the known
// files, says once when it cannot, and can be turned off. Process-wide, so
// each case runs in a child process of its own. The produce retry it
// corrects is tested on a real cluster (kafka-cluster.test.js).
const t = require('tap')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { execFile } = require('node:child_process')
const { groupMessagesPerPartition, KNOWN } = require('../lib/kafka/kafkajs-patch')
const { withWarnings } = require('./helpers/with-warnings')

const root = path.join(__dirname, '..')
const kafkajsDir = path.dirname(require.resolve('kafkajs'))
const original = require(path.join(kafkajsDir, 'src/producer/groupMessagesPerPartition.js'))

function run (script, env = {}) {
  return new Promise((resolve) => {
    execFile(process.execPath, ['-e', script], { cwd: root, env: withWarnings({ ...process.env, ...env }) }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, stdout, stderr })
    })
  })
}

t.test('the linear grouping gives kafkajs\'s result, calling the partitioner in the same order', async (t) => {
  const partitionMetadata = Array.from({ length: 7 }, (_, i) => ({ partitionId: i, leader: i % 3 }))
  // A partitioner with state, like kafkajs's round robin for keyless messages.
  const partitioner = () => {
    let counter = 0
    return ({ message }) => message.key === null ? counter++ % 7 : Number(message.key) % 7
  }
  for (const size of [0, 1, 2, 50, 1000]) {
    const messages = Array.from({ length: size }, (_, i) => ({ key: i % 3 === 0 ? null : String(i * 31), value: String(i) }))
    const ours = groupMessagesPerPartition({ topic: 't', partitionMetadata, messages, partitioner: partitioner() })
    const theirs = original({ topic: 't', partitionMetadata, messages, partitioner: partitioner() })
    t.same(ours, theirs, `${size} messages`)
    t.same(Object.keys(ours), Object.keys(theirs), 'partitions in the same order')
  }
  t.same(groupMessagesPerPartition({ topic: 't', partitionMetadata: [], messages: [{ value: 'x' }], partitioner: partitioner() }), {}, 'no metadata, no groups')
})

const report = `
  const status = () => require('./lib/kafka/kafkajs-patch').kafkajsPatchStatus()
  const warnings = []
  process.on('warning', (w) => warnings.push(w.code))
  const done = (extra) => setImmediate(() => process.stdout.write(JSON.stringify({ status: status(), warnings, ...extra })))
`

t.test('install() puts the corrected files in place before kafkajs loads; its producer uses them', async (t) => {
  const { code, stdout, stderr } = await run(`${report}
    const handle = require('io-hygiene').install({ dns: false, http: false })
    const { Kafka } = require('kafkajs')
    const ours = require('kafkajs/src/producer/groupMessagesPerPartition') === require('./lib/kafka/kafkajs-patch').groupMessagesPerPartition
    new Kafka({ brokers: ['127.0.0.1:1'] }).producer()
    // Again, kafkajs loaded on the corrected files: still patched, no warning.
    require('./lib/kafka/kafkajs-patch').installKafkajsPatch()
    done({ ours, stats: handle.stats().kafkajs })
  `)
  t.equal(code, 0, stderr)
  const out = JSON.parse(stdout)
  t.equal(out.status, 'patched')
  t.ok(out.ours, 'kafkajs requires the linear grouping')
  t.same(out.stats, { status: 'patched' }, 'install().stats() says so')
  t.same(out.warnings, [], 'no warning')
})

t.test('kafkajs loaded first: left alone, one warning naming the fix, and stats() says why', async (t) => {
  const { code, stdout, stderr } = await run(`${report}
    const { Kafka } = require('kafkajs')
    const { wrapProducer } = require('io-hygiene')
    const kafka = new Kafka({ brokers: ['127.0.0.1:1'] })
    const a = wrapProducer(kafka.producer())
    wrapProducer(kafka.producer())
    done({ stats: a.stats().kafkajsPatch })
  `)
  t.equal(code, 0, stderr)
  const out = JSON.parse(stdout)
  t.equal(out.status, 'loaded-too-early')
  t.equal(out.stats, 'loaded-too-early')
  t.same(out.warnings, ['IO_HYGIENE_KAFKAJS_NOT_PATCHED'], 'warned once for two producers')
  t.match(stderr, /-r io-hygiene\/register/, 'the warning names the fix')
})

t.test('turned off by IO_HYGIENE_KAFKAJS=0 or install({ kafkajs: false }): not patched, no warning', async (t) => {
  for (const [how, env, call] of [
    ['the variable', { IO_HYGIENE_KAFKAJS: '0' }, "require('io-hygiene').install({ dns: false, http: false })"],
    ['the option', {}, "require('io-hygiene').install({ dns: false, http: false, kafkajs: false })"],
    ['the variable, without install()', { IO_HYGIENE_KAFKAJS: '0' }, ''],
  ]) {
    const { code, stdout, stderr } = await run(`${report}
      ${call}
      const { Kafka } = require('kafkajs')
      const ours = require('kafkajs/src/producer/groupMessagesPerPartition') === require('./lib/kafka/kafkajs-patch').groupMessagesPerPartition
      const p = require('io-hygiene').wrapProducer(new Kafka({ brokers: ['127.0.0.1:1'] }).producer())
      done({ ours, stats: p.stats().kafkajsPatch })
    `, env)
    t.equal(code, 0, stderr)
    const out = JSON.parse(stdout)
    t.same(out, { status: 'off', warnings: [], ours: false, stats: 'off' }, how)
  }
})

t.test('any other kafkajs is left alone, with one warning', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-kafkajs-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  for (const name of Object.keys(KNOWN)) {
    fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true })
    fs.copyFileSync(path.join(kafkajsDir, name), path.join(dir, name))
  }
  const other = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-kafkajs-'))
  t.teardown(() => fs.rmSync(other, { recursive: true, force: true }))
  fs.cpSync(dir, other, { recursive: true })
  // One byte of difference is another kafkajs, of the same length or not; so
  // is one without a file.
  const edited = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-kafkajs-'))
  t.teardown(() => fs.rmSync(edited, { recursive: true, force: true }))
  fs.cpSync(dir, edited, { recursive: true })
  const file = path.join(edited, 'src/producer/groupMessagesPerPartition.js')
  fs.writeFileSync(file, fs.readFileSync(file, 'utf8').replace('partition', 'pArtition'))
  fs.appendFileSync(path.join(dir, 'src/producer/sendMessages.js'), '\n')
  fs.rmSync(path.join(other, 'src/producer/createTopicData.js'))
  for (const copy of [dir, other, edited]) {
    const { code, stdout, stderr } = await run(`${report}
      const { installKafkajsPatch } = require('./lib/kafka/kafkajs-patch')
      installKafkajsPatch({ dir: ${JSON.stringify(copy)} })
      installKafkajsPatch({ dir: ${JSON.stringify(copy)} })
      done({ cached: Object.keys(require.cache).some((f) => f.startsWith(${JSON.stringify(copy)})) })
    `)
    t.equal(code, 0, stderr)
    t.same(JSON.parse(stdout), { status: 'unknown-version', warnings: ['IO_HYGIENE_KAFKAJS_NOT_PATCHED'], cached: false })
  }
})

t.test('no kafkajs to be found: nothing patched, no warning', async (t) => {
  const { installKafkajsPatch } = require('../lib/kafka/kafkajs-patch')
  t.equal(installKafkajsPatch({ dir: null })(), undefined, 'an undo that does nothing')
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-no-kafkajs-'))
  t.teardown(() => fs.rmSync(cwd, { recursive: true, force: true }))
  const lib = JSON.stringify(path.join(root, 'lib', 'kafka', 'kafkajs-patch.js'))
  const { code, stdout, stderr } = await new Promise((resolve) => {
    execFile(process.execPath, ['-e', `
      const p = require(${lib})
      p.installKafkajsPatch()
      process.stdout.write(p.kafkajsPatchStatus())
    `], { cwd }, (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stdout, stderr }))
  })
  t.equal(code, 0, stderr)
  t.equal(stdout, 'not-found')
})

t.test('uninstall() takes the files out of require.cache while kafkajs is not loaded', async (t) => {
  const { code, stdout, stderr } = await run(`${report}
    const io = require('io-hygiene')
    io.install({ dns: false, http: false })
    io.uninstall()
    const ours = require('kafkajs/src/producer/groupMessagesPerPartition') === require('./lib/kafka/kafkajs-patch').groupMessagesPerPartition
    done({ ours })
  `)
  t.equal(code, 0, stderr)
  t.same(JSON.parse(stdout), { status: 'not-installed', warnings: [], ours: false })
})

t.test('a send on a producer that was never connected fails at once, as kafkajs does, with a coded error', async (t) => {
  const { Kafka, logLevel } = require('kafkajs')
  const { wrapProducer } = require('../lib/kafka')
  // Never contacted: kafkajs refuses before any I/O.
  const kafka = new Kafka({ brokers: ['127.0.0.1:1'], logLevel: logLevel.NOTHING })
  await t.rejects(kafka.producer().send({ topic: 't', messages: [{ value: 'x' }] }), { name: 'KafkaJSError', message: 'The producer is disconnected' }, 'plain kafkajs')
  const producer = wrapProducer(kafka.producer(), { flushOnSignals: false })
  const error = await producer.send({ topic: 't', messages: [{ value: 'x' }] }).catch((e) => e)
  t.match(error, { code: 'ERR_IO_HYGIENE_NOT_CONNECTED', message: /call connect\(\)/ })
  t.equal(error.written, false, 'it says nothing was written')
  t.equal(error.cause.name, 'KafkaJSError', 'kafkajs\'s error is the cause')
  const stats = producer.stats()
  t.equal(stats.retried, 0, 'not retried')
  t.equal(stats.queued + stats.inFlight + stats.waiting, 0, 'nothing left pending')
  await producer.connect().catch(() => {})
  await producer.disconnect({ timeoutMs: 1000 }).catch(() => {})
})
