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
const { groupMessagesPerPartition, KNOWN } = require('../lib/kafka/kafkajs-known')
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

// reads(): the files under \`dir\` that the process has read through node:fs
// so far (Node 22's module loader reads through it too).
const watchReads = (dir) => `
  const reads = (() => {
    const fs = require('node:fs')
    const list = []
    for (const name of ['readFileSync', 'openSync']) {
      const original = fs[name]
      fs[name] = function (file, ...rest) {
        if (String(file).startsWith(${JSON.stringify(dir + path.sep)})) list.push(require('node:path').relative(${JSON.stringify(dir)}, String(file)))
        return original.call(this, file, ...rest)
      }
    }
    return () => [...new Set(list)]
  })()
`

// A whole kafkajs with one byte of groupMessagesPerPartition.js changed, in
// place and harmlessly (\`===\` for \`==\`): another kafkajs that works.
function editedKafkajs (t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-kafkajs-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  fs.cpSync(kafkajsDir, dir, { recursive: true })
  const file = path.join(dir, 'src/producer/groupMessagesPerPartition.js')
  const text = fs.readFileSync(file, 'utf8')
  t.ok(text.includes('length === 0'), 'the byte to edit is there')
  fs.writeFileSync(file, text.replace('length === 0', 'length ==  0'))
  return dir
}

t.test('install() puts the corrected files in place before kafkajs loads; its producer uses them', async (t) => {
  const { code, stdout, stderr } = await run(`${report}
    const handle = require('io-hygiene').install({ dns: false, http: false })
    const { Kafka } = require('kafkajs')
    const ours = require('kafkajs/src/producer/groupMessagesPerPartition') === require('./lib/kafka/kafkajs-known').groupMessagesPerPartition
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
  t.match(stderr, /\[IO_HYGIENE_KAFKAJS_NOT_PATCHED\] IoHygieneWarning: kafkajs was loaded before io-hygiene/, 'an IoHygieneWarning, as every warning of ours')
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
      const ours = require('kafkajs/src/producer/groupMessagesPerPartition') === require('./lib/kafka/kafkajs-known').groupMessagesPerPartition
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
    // Checked when first asked (here by the status), not at install.
    const { code, stdout, stderr } = await run(`${report}${watchReads(copy)}
      const { installKafkajsPatch } = require('./lib/kafka/kafkajs-patch')
      installKafkajsPatch({ dir: ${JSON.stringify(copy)} })
      installKafkajsPatch({ dir: ${JSON.stringify(copy)} })
      const atInstall = reads()
      const first = status()
      const cached = Object.keys(require.cache).some((f) => f.startsWith(${JSON.stringify(copy)}))
      // Installed again after the check: checked again, not said again.
      installKafkajsPatch({ dir: ${JSON.stringify(copy)} })
      done({ atInstall, first, cached })
    `)
    t.equal(code, 0, stderr)
    t.same(JSON.parse(stdout), { status: 'unknown-version', warnings: ['IO_HYGIENE_KAFKAJS_NOT_PATCHED'], atInstall: [], first: 'unknown-version', cached: false })
  }
})

t.test('install() reads no kafkajs file; kafkajs\'s first require of a corrected file checks every known file', async (t) => {
  const { code, stdout, stderr } = await run(`${report}${watchReads(kafkajsDir)}
    ;(async () => {
      require('io-hygiene').install({ dns: false, http: false })
      await new Promise(setImmediate)
      const atInstall = reads()
      const warnedAtInstall = warnings.length
      const { Kafka } = require('kafkajs')
      const afterKafkajs = reads().filter((f) => Object.keys(require('./lib/kafka/kafkajs-known').KNOWN).includes(f)).sort()
      const ours = require('kafkajs/src/producer/groupMessagesPerPartition') === require('./lib/kafka/kafkajs-known').groupMessagesPerPartition
      new Kafka({ brokers: ['127.0.0.1:1'], logLevel: 0 }).producer()
      done({ atInstall, warnedAtInstall, afterKafkajs, ours })
    })()
  `)
  t.equal(code, 0, stderr)
  t.same(JSON.parse(stdout), {
    status: 'patched',
    warnings: [],
    atInstall: [],
    warnedAtInstall: 0,
    afterKafkajs: Object.keys(KNOWN).sort(),
    ours: true,
  })
})

t.test('an edited kafkajs: nothing read or said at install; when kafkajs loads, it runs its own files and one warning says so', async (t) => {
  const copy = editedKafkajs(t)
  const { code, stdout, stderr } = await run(`${report}${watchReads(copy)}
    ;(async () => {
      const { installKafkajsPatch } = require('./lib/kafka/kafkajs-patch')
      const { groupMessagesPerPartition } = require('./lib/kafka/kafkajs-known')
      installKafkajsPatch({ dir: ${JSON.stringify(copy)} })
      await new Promise(setImmediate)
      const atInstall = reads()
      const warnedAtInstall = warnings.length
      const { Kafka } = require(${JSON.stringify(copy)})
      const kafka = new Kafka({ brokers: ['127.0.0.1:1'], logLevel: 0 })
      kafka.producer()
      kafka.producer()
      const grouping = require(${JSON.stringify(path.join(copy, 'src/producer/groupMessagesPerPartition.js'))})
      done({ atInstall, warnedAtInstall, edited: grouping.toString().includes('length ==  0'), ours: grouping === groupMessagesPerPartition })
    })()
  `)
  t.equal(code, 0, stderr)
  t.same(JSON.parse(stdout), {
    status: 'unknown-version',
    warnings: ['IO_HYGIENE_KAFKAJS_NOT_PATCHED'],
    atInstall: [],
    warnedAtInstall: 0,
    edited: true,
    ours: false,
  })
  t.match(stderr, /is not the kafkajs 2\.2\.x that io-hygiene corrects/)
})

t.test('kafkajsPatchStatus() before kafkajs loads runs the check and answers truthfully', async (t) => {
  const copy = editedKafkajs(t)
  for (const [dir, expected] of [[kafkajsDir, 'patched'], [copy, 'unknown-version']]) {
    const { code, stdout, stderr } = await run(`${report}
      const p = require('./lib/kafka/kafkajs-patch')
      p.installKafkajsPatch({ dir: ${JSON.stringify(dir)} })
      const first = p.kafkajsPatchStatus()
      const producerLoaded = require.cache[${JSON.stringify(path.join(dir, 'src/producer/messageProducer.js'))}] !== undefined
      const { Kafka } = require(${JSON.stringify(dir)})
      new Kafka({ brokers: ['127.0.0.1:1'], logLevel: 0 }).producer()
      const ours = require(${JSON.stringify(path.join(dir, 'src/producer/groupMessagesPerPartition.js'))}) === require('./lib/kafka/kafkajs-known').groupMessagesPerPartition
      done({ first, producerLoaded, ours })
    `)
    t.equal(code, 0, stderr)
    t.same(JSON.parse(stdout), {
      status: expected,
      warnings: expected === 'patched' ? [] : ['IO_HYGIENE_KAFKAJS_NOT_PATCHED'],
      first: expected,
      producerLoaded: false,
      ours: expected === 'patched',
    }, expected)
  }
})

t.test('anyone reading require.cache runs the check: the corrected exports, or the file itself', async (t) => {
  const copy = editedKafkajs(t)
  for (const [dir, expected] of [[kafkajsDir, 'patched'], [copy, 'unknown-version']]) {
    const file = JSON.stringify(path.join(dir, 'src/producer/groupMessagesPerPartition.js'))
    const { code, stdout, stderr } = await run(`${report}${watchReads(dir)}
      const p = require('./lib/kafka/kafkajs-patch')
      p.installKafkajsPatch({ dir: ${JSON.stringify(dir)} })
      const exports = require.cache[${file}].exports
      // The check reads sendMessages.js first; loading the grouping never does.
      const checked = reads().includes('src/producer/sendMessages.js')
      done({ checked, ours: exports === require('./lib/kafka/kafkajs-known').groupMessagesPerPartition, same: require(${file}) === exports })
    `)
    t.equal(code, 0, stderr)
    t.same(JSON.parse(stdout), {
      status: expected,
      warnings: expected === 'patched' ? [] : ['IO_HYGIENE_KAFKAJS_NOT_PATCHED'],
      checked: true,
      ours: expected === 'patched',
      same: true,
    }, expected)
  }
})

t.test('exports assigned over an entry (a test\'s mock) stay, unchecked, and uninstall() leaves them', async (t) => {
  const { code, stdout, stderr } = await run(`${report}${watchReads(kafkajsDir)}
    const io = require('io-hygiene')
    io.install({ dns: false, http: false })
    const file = require.resolve('kafkajs/src/producer/groupMessagesPerPartition')
    const mock = () => ({})
    require.cache[file].exports = mock
    const mocked = require(file) === mock && reads().length === 0
    io.uninstall()
    done({ mocked, kept: require(file) === mock })
  `)
  t.equal(code, 0, stderr)
  t.same(JSON.parse(stdout), { status: 'not-installed', warnings: [], mocked: true, kept: true })
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
  for (const checkFirst of [false, true]) {
    const { code, stdout, stderr } = await run(`${report}
      const io = require('io-hygiene')
      io.install({ dns: false, http: false })
      const file = require.resolve('kafkajs/src/producer/groupMessagesPerPartition')
      // An entry someone took from require.cache before the uninstall.
      const held = require.cache[file]
      if (${checkFirst}) status()
      io.uninstall()
      const ours = require(file) === require('./lib/kafka/kafkajs-known').groupMessagesPerPartition
      done({ ours, held: held.exports === require(file) || held.exports === require('./lib/kafka/kafkajs-known').groupMessagesPerPartition })
    `)
    t.equal(code, 0, stderr)
    t.same(JSON.parse(stdout), { status: 'not-installed', warnings: [], ours: false, held: true }, checkFirst ? 'after the check' : 'before it')
  }
})

t.test('an entry\'s lookup paths are Node\'s own, worked out when first read (not at install), and can be set', async (t) => {
  const { code, stdout, stderr } = await run(`${report}
    const Module = require('node:module')
    const path = require('node:path')
    const original = Module._nodeModulePaths
    let asked = 0
    const kafkajs = path.dirname(require.resolve('kafkajs')) + path.sep
    Module._nodeModulePaths = function (from) {
      if (from.startsWith(kafkajs)) asked++
      return original.call(this, from)
    }
    const io = require('io-hygiene')
    io.install({ dns: false, http: false })
    const atInstall = asked
    const [grouping, record] = ['src/producer/groupMessagesPerPartition', 'src/protocol/recordBatch/record/v0/index'].map((name) => require.cache[require.resolve('kafkajs/' + name)])
    const paths = grouping.paths
    const same = JSON.stringify(paths) === JSON.stringify(original(path.dirname(grouping.filename))) && grouping.paths === paths
    record.paths = ['elsewhere']
    done({ atInstall, same, set: record.paths })
  `)
  t.equal(code, 0, stderr)
  t.same(JSON.parse(stdout), { status: 'patched', warnings: [], atInstall: 0, same: true, set: ['elsewhere'] })
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

t.test('the record encoder in kafkajs\'s place hands kafkajs\'s own encoder what it does not take', async (t) => {
  const Record = require(path.join(kafkajsDir, 'src/protocol/recordBatch/record/v0'))
  const far = { value: 'v', timestampDelta: 2 ** 52 }
  let thrown
  try {
    Record({ value: 42 })
  } catch (error) {
    thrown = `${error.name}: ${error.message}`
  }
  const { code, stdout, stderr } = await run(`${report}
    require('./lib/kafka/kafkajs-patch').installKafkajsPatch()
    const Record = require('kafkajs/src/protocol/recordBatch/record/v0')
    let thrown
    try {
      Record({ value: 42 })
    } catch (error) {
      thrown = error.name + ': ' + error.message
    }
    done({ name: Record.name, thrown, far: Record({ value: 'v', timestampDelta: 2 ** 52 }).buffer.toString('hex') })
  `)
  t.equal(code, 0, stderr)
  t.same(JSON.parse(stdout), { status: 'patched', warnings: [], name: 'Record', thrown, far: Record(far).buffer.toString('hex') })
})
