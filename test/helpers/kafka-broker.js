'use strict'

// A real single-node Apache Kafka (KRaft, broker+controller) on loopback, for
// tests and benchmarks. The jars come from Maven Central through test/kafka/pom.xml
// and are cached under .cache/ (git-ignored), so a fresh machine needs only
// Java 17 and Maven. Usage:
//
//   const broker = await startKafka()       // { brokers: ['127.0.0.1:PORT'], pid, ... }
//   await broker.stop()                     // SIGTERM, SIGKILL after a deadline
//   await broker.start()                    // same port, same data: a restart
//   await broker.close()                    // stop and remove the data folder
//
// `node test/helpers/kafka-broker.js --fetch` only downloads the jars (for CI).
const { spawn, execFile } = require('node:child_process')
const crypto = require('node:crypto')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')

const root = path.resolve(__dirname, '..', '..')
const pom = path.join(root, 'test', 'kafka', 'pom.xml')
const cacheDir = path.join(root, '.cache')

// The classpath file is keyed by the pom's content, so editing the pom
// (another Kafka version) fetches again instead of running stale jars.
function classpathFile () {
  const hash = crypto.createHash('sha256').update(fs.readFileSync(pom)).digest('hex').slice(0, 12)
  return path.join(cacheDir, `kafka-classpath-${hash}.txt`)
}

function readClasspath (file) {
  let text
  try {
    text = fs.readFileSync(file, 'utf8').trim()
  } catch {
    return null
  }
  const jars = text.split(path.delimiter).filter(Boolean)
  if (jars.length === 0 || !jars.every((jar) => fs.existsSync(jar))) return null
  return jars.join(path.delimiter)
}

let fetching = null
// Downloads Kafka and its dependencies into .cache/m2 (never ~/.m2) and returns
// the classpath. Cached: the second call does not start Maven. `log` gets a
// line when Maven starts and one per 25 files it has downloaded, so a first
// run (tens of MB) shows progress.
function fetchKafka ({ log = () => {} } = {}) {
  const file = classpathFile()
  const cached = readClasspath(file)
  if (cached) return Promise.resolve(cached)
  if (fetching) return fetching
  fs.mkdirSync(cacheDir, { recursive: true })
  const tmp = `${file}.${process.pid}.tmp`
  const args = [
    '-B', '-f', pom,
    `-Dmaven.repo.local=${path.join(cacheDir, 'm2')}`,
    'dependency:build-classpath',
    `-Dmdep.outputFile=${tmp}`,
  ]
  log(`fetching Kafka jars (first run only; needs Java 17 and Maven): mvn ${args.join(' ')}`)
  const started = Date.now()
  let downloaded = 0
  fetching = new Promise((resolve, reject) => {
    const child = execFile('mvn', args, { maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      fetching = null
      if (error) {
        error.message += `\n${stdout}\n${stderr}`
        return reject(error)
      }
      log(`fetched ${downloaded} files in ${Math.round((Date.now() - started) / 1000)} s`)
      fs.renameSync(tmp, file)
      const classpath = readClasspath(file)
      if (!classpath) return reject(new Error(`mvn wrote no usable classpath to ${file}`))
      resolve(classpath)
    })
    let partial = ''
    child.stdout.on('data', (chunk) => {
      const lines = (partial + chunk).split('\n')
      partial = lines.pop()
      for (const line of lines) {
        const jar = /^\[INFO\] Downloaded from \S+ \S+\/([^/\s]+) /.exec(line)?.[1]
        if (jar !== undefined && ++downloaded % 25 === 0) log(`  ${downloaded} files downloaded (${jar})`)
      }
    })
  })
  return fetching
}

function freePort () {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.unref()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
  })
}

function canConnect (port) {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port })
    socket.setTimeout(1000)
    const done = (ok) => { socket.destroy(); resolve(ok) }
    socket.once('connect', () => done(true))
    socket.once('error', () => done(false))
    socket.once('timeout', () => done(false))
  })
}

function javaBin () {
  return process.env.JAVA_HOME ? path.join(process.env.JAVA_HOME, 'bin', 'java') : 'java'
}

// The java binary a start will run, resolved as exec would (for the archive's
// name below); null if none is found, and then the start fails as before.
function javaPath () {
  const bin = javaBin()
  const dirs = bin.includes(path.sep) ? [''] : (process.env.PATH ?? '').split(path.delimiter)
  for (const dir of dirs) {
    try {
      const file = fs.realpathSync(path.join(dir, bin))
      fs.accessSync(file, fs.constants.X_OK)
      return file
    } catch {}
  }
  return null
}

// A JVM spends most of a broker's start loading and verifying classes: a
// class-data archive (AppCDS) of the classes a broker loaded maps them in at
// the next start instead. The first broker started without one writes it as
// it exits; every start after that (and the storage tool) reads it. Named by
// the jars (the classpath file) and the JVM, both of which it is valid for
// only; a JVM that cannot use it ignores it (-Xshare:auto, the default).
function classArchive () {
  const java = javaPath()
  if (java === null) return null
  const stat = fs.statSync(java)
  const hash = crypto.createHash('sha256').update(`${path.basename(classpathFile())} ${java} ${stat.size} ${stat.mtimeMs}`).digest('hex').slice(0, 12)
  return path.join(cacheDir, `kafka-classes-${hash}.jsa`)
}

// Kafka's cluster ids are 16 random bytes in unpadded base64url (22 chars).
// Like Kafka's Uuid.randomUuid(), never one that starts with "-": the storage
// tool would read it as an option.
function clusterId () {
  let id
  do id = crypto.randomBytes(16).toString('base64url')
  while (id.startsWith('-'))
  return id
}

// One node by default; a cluster passes its node id, every node's controller
// port (the voters) and its replication settings.
function serverProperties ({ port, controllerPort, logDir, partitions, nodeId = 1, voters = `1@127.0.0.1:${controllerPort}`, replicas = 1, minInsync = 1 }) {
  return [
    'process.roles=broker,controller',
    `node.id=${nodeId}`,
    `controller.quorum.voters=${voters}`,
    `listeners=PLAINTEXT://127.0.0.1:${port},CONTROLLER://127.0.0.1:${controllerPort}`,
    `advertised.listeners=PLAINTEXT://127.0.0.1:${port}`,
    'controller.listener.names=CONTROLLER',
    'inter.broker.listener.name=PLAINTEXT',
    'listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT',
    `log.dirs=${logDir}`,
    // Few partitions for internal topics, so that the first consumer group
    // and the first transaction start quickly.
    `num.partitions=${partitions}`,
    `default.replication.factor=${replicas}`,
    `min.insync.replicas=${minInsync}`,
    `offsets.topic.replication.factor=${replicas}`,
    'offsets.topic.num.partitions=1',
    `transaction.state.log.replication.factor=${replicas}`,
    `transaction.state.log.min.isr=${minInsync}`,
    'transaction.state.log.num.partitions=1',
    'auto.create.topics.enable=true',
    'group.initial.rebalance.delay.ms=0',
    // Small segments and few threads: a test broker on a 2-core machine.
    'log.segment.bytes=16777216',
    'log.retention.check.interval.ms=300000',
    'num.network.threads=2',
    'num.io.threads=2',
    'num.recovery.threads.per.data.dir=1',
    'log.flush.interval.messages=9223372036854775807',
    // Restarts in tests: give up quickly on a controlled shutdown.
    'controlled.shutdown.enable=true',
    'controlled.shutdown.max.retries=1',
    'shutdown.timeout.ms=5000',
    '',
  ].join('\n')
}

class KafkaBroker {
  #classpath
  #dir
  #ownDir
  #child = null
  #exited = null
  #logStream = null
  port = 0
  controllerPort = 0
  heapMb

  constructor ({ classpath, dir, ownDir, heapMb }) {
    this.#classpath = classpath
    this.#dir = dir
    this.#ownDir = ownDir
    this.heapMb = heapMb
  }

  get brokers () {
    return [`127.0.0.1:${this.port}`]
  }

  get pid () {
    return this.#child?.pid ?? null
  }

  get running () {
    return this.#child !== null
  }

  get dir () {
    return this.#dir
  }

  get logFile () {
    return path.join(this.#dir, 'broker.log')
  }

  async ports (taken = new Set()) {
    do this.port = await freePort()
    while (taken.has(this.port))
    taken.add(this.port)
    do this.controllerPort = await freePort()
    while (taken.has(this.controllerPort))
    taken.add(this.controllerPort)
  }

  // `cluster` (a cluster's node): { id, nodeId, voters, replicas, minInsync }.
  async init ({ partitions, cluster = null }) {
    if (this.port === 0) await this.ports()
    const config = path.join(this.#dir, 'server.properties')
    fs.writeFileSync(config, serverProperties({
      port: this.port,
      controllerPort: this.controllerPort,
      logDir: path.join(this.#dir, 'data'),
      partitions,
      ...(cluster === null ? {} : cluster),
    }))
    await this.#java(['kafka.tools.StorageTool', 'format', '-t', cluster?.id ?? clusterId(), '-c', config, '--ignore-formatted'])
  }

  // `dump`: where this JVM writes the class archive as it exits, if it should.
  #javaArgs (main, dump = null) {
    const archive = classArchive()
    return [
      `-Xmx${this.heapMb}m`, `-Xms${Math.min(this.heapMb, 256)}m`,
      '-XX:+UseG1GC', '-XX:MaxGCPauseMillis=20',
      // Under the test runner only: the client compiler alone starts the JVM
      // in about two thirds of the CPU, and a test's traffic needs no more;
      // a benchmark's broker keeps the optimizing compiler.
      ...(process.env.TAP === '1' ? ['-XX:TieredStopAtLevel=1'] : []),
      ...(dump !== null ? [`-XX:ArchiveClassesAtExit=${dump}`] : archive !== null && fs.existsSync(archive) ? [`-XX:SharedArchiveFile=${archive}`] : []),
      '-Djava.awt.headless=true',
      '-Dorg.slf4j.simpleLogger.defaultLogLevel=warn',
      '-Dorg.slf4j.simpleLogger.showDateTime=true',
      '-cp', this.#classpath,
      main,
    ]
  }

  #java (args) {
    const [main, ...rest] = args
    return new Promise((resolve, reject) => {
      execFile(javaBin(), [...this.#javaArgs(main), ...rest], { maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
        if (error) {
          error.message += `\n${stdout}\n${stderr}`
          return reject(error)
        }
        resolve(stdout)
      })
    })
  }

  // Starts the broker (again) on the same ports and data, and resolves once
  // it answers a kafkajs admin request.
  async start ({ timeoutMs = 90_000 } = {}) {
    if (this.#child) return this
    this.#logStream = fs.openSync(this.logFile, 'a')
    // No class archive yet: this broker writes one as it exits, to a name of
    // its own, renamed into place only if the JVM ended by itself (a SIGKILL
    // can leave half a file).
    const archive = classArchive()
    const dump = archive !== null && !fs.existsSync(archive) ? `${archive}.${process.pid}.${this.port}.tmp` : null
    const child = spawn(javaBin(), [...this.#javaArgs('kafka.Kafka', dump), path.join(this.#dir, 'server.properties')], {
      stdio: ['ignore', this.#logStream, this.#logStream],
    })
    this.#child = child
    this.#exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal })))
    this.#exited.then(({ signal }) => {
      if (this.#child === child) this.#child = null
      fs.closeSync(this.#logStream)
      if (dump === null) return
      try {
        if (signal === null && fs.existsSync(dump)) fs.renameSync(dump, archive)
        else fs.rmSync(dump, { force: true })
      } catch {}
    })
    const deadline = Date.now() + timeoutMs
    let ready = false
    let lastError = null
    while (Date.now() < deadline) {
      if (this.#child !== child) break
      if (await canConnect(this.port)) {
        try {
          await this.#probe()
          ready = true
          break
        } catch (error) {
          lastError = error
        }
      }
      await sleep(250)
    }
    if (!ready) {
      await this.kill()
      const tail = fs.readFileSync(this.logFile, 'utf8').slice(-4000)
      throw new Error(`Kafka did not start within ${timeoutMs} ms (${lastError?.message ?? 'no answer'}); log tail:\n${tail}`)
    }
    return this
  }

  async #probe () {
    const { Kafka, logLevel } = require('kafkajs')
    const admin = new Kafka({
      clientId: 'kafka-broker-probe',
      brokers: this.brokers,
      logLevel: logLevel.NOTHING,
      retry: { retries: 0 },
      connectionTimeout: 1000,
    }).admin()
    try {
      await admin.connect()
      await admin.listTopics()
    } finally {
      await admin.disconnect()
    }
  }

  // SIGTERM (a clean shutdown keeps the data consistent for a restart), then
  // SIGKILL if the broker is still there after `timeoutMs`.
  async stop ({ timeoutMs = 15_000 } = {}) {
    const child = this.#child
    if (!child) return
    child.kill('SIGTERM')
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    await this.#exited
    clearTimeout(timer)
  }

  async kill () {
    const child = this.#child
    if (!child) return
    child.kill('SIGKILL')
    await this.#exited
  }

  async restart (options) {
    await this.stop(options)
    return this.start(options)
  }

  // Stops the broker and removes the data folder if we created it.
  async close () {
    await this.stop()
    if (this.#ownDir) fs.rmSync(this.#dir, { recursive: true, force: true })
  }
}

const live = new Set()
process.once('exit', () => {
  // Last resort so that a crashed test run leaves no broker behind.
  for (const broker of live) if (broker.pid) try { process.kill(broker.pid, 'SIGKILL') } catch {}
})

// The brokers are probed with kafkajs: without it no probe can answer, and
// waiting out the start deadline would only hide why.
function needKafkajs () {
  try {
    require.resolve('kafkajs')
  } catch (cause) {
    throw new Error('kafkajs is not installed: the Kafka test helper asks the broker with it (npm install, with dev dependencies)', { cause })
  }
}

async function startKafka ({ dir, heapMb = 512, partitions = 1, timeoutMs, log } = {}) {
  needKafkajs()
  const classpath = await fetchKafka({ log })
  const ownDir = !dir
  dir = dir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-kafka-'))
  fs.mkdirSync(dir, { recursive: true })
  const broker = new KafkaBroker({ classpath, dir, ownDir, heapMb })
  live.add(broker)
  const close = broker.close.bind(broker)
  broker.close = async () => {
    await close()
    live.delete(broker)
  }
  try {
    await broker.init({ partitions })
    await broker.start({ timeoutMs })
  } catch (error) {
    await broker.close()
    throw error
  }
  return broker
}

// A KRaft cluster of `size` nodes on loopback, each broker and controller
// (every node a voter, so that a majority survives one node stopped), with
// `replicas`-fold replication and `minInsync` by default. Started once per
// test file: a JVM start costs seconds of a shared CPU.
//
//   const cluster = await startKafkaCluster()   // { brokers, nodes, ... }
//   await cluster.nodes[1].restart()            // one node, same port and data
//   await cluster.electPreferredLeaders(topic)  // the Admin API's electLeaders
//   await cluster.close()                       // every JVM stopped by PID
async function startKafkaCluster ({ size = 3, heapMb = 256, partitions = 1, replicas = Math.min(3, size), minInsync = Math.min(2, replicas), timeoutMs, log } = {}) {
  needKafkajs()
  const classpath = await fetchKafka({ log })
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-kafka-cluster-'))
  const nodes = []
  const taken = new Set()
  for (let i = 0; i < size; i++) {
    const dir = path.join(root, `node-${i + 1}`)
    fs.mkdirSync(dir)
    const node = new KafkaBroker({ classpath, dir, ownDir: false, heapMb })
    node.nodeId = i + 1
    await node.ports(taken)
    nodes.push(node)
    live.add(node)
  }
  const voters = nodes.map((n) => `${n.nodeId}@127.0.0.1:${n.controllerPort}`).join(',')
  const id = clusterId()
  const close = async () => {
    // Each JVM by its own PID, all of them even when one fails to stop.
    await Promise.allSettled(nodes.map((n) => n.stop()))
    for (const n of nodes) live.delete(n)
    fs.rmSync(root, { recursive: true, force: true })
  }
  try {
    // One after the other: formatting is a JVM each, and the CPU is shared.
    for (const node of nodes) await node.init({ partitions, cluster: { id, nodeId: node.nodeId, voters, replicas, minInsync } })
    // Together: no node answers before a majority of voters is up.
    await Promise.all(nodes.map((n) => n.start({ timeoutMs })))
  } catch (error) {
    await close()
    throw error
  }
  return {
    nodes,
    get brokers () {
      return nodes.map((n) => `127.0.0.1:${n.port}`)
    },
    // Kafka's preferred-leader election, through the Admin API (kafkajs has
    // no ElectLeaders): Java's source launcher runs test/kafka/ElectLeaders.java.
    electPreferredLeaders (topic) {
      const bootstrap = nodes.filter((n) => n.running).map((n) => `127.0.0.1:${n.port}`).join(',')
      const source = path.join(__dirname, '..', 'kafka', 'ElectLeaders.java')
      return new Promise((resolve, reject) => {
        execFile(javaBin(), ['-Xmx64m', '-XX:TieredStopAtLevel=1', '-cp', classpath, source, bootstrap, topic], { timeout: 60_000 }, (error, stdout, stderr) => {
          if (error) {
            error.message += `\n${stdout}\n${stderr}`
            return reject(error)
          }
          resolve(stdout.trim())
        })
      })
    },
    close,
  }
}

// Reads `topic` from the beginning with a real kafkajs consumer until `count`
// messages arrived and every partition was read to the end it had when the
// call began (so duplicates past `count`, if any, are in the result), or
// until `timeoutMs` passed, then what arrived; as
// { partition, offset, key, value, headers } with strings for key and value.
async function consumeAll (kafka, topic, count, { timeoutMs = 60_000, readUncommitted = false } = {}) {
  const admin = kafka.admin()
  await admin.connect()
  let offsets
  try {
    offsets = await admin.fetchTopicOffsets(topic)
  } finally {
    await admin.disconnect()
  }
  // Partition -> its high watermark, until a fetch reads up to it.
  const behind = new Map()
  for (const { partition, high, low } of offsets) if (Number(high) > Number(low)) behind.set(partition, Number(high))
  const consumer = kafka.consumer({
    groupId: `check-${topic}-${crypto.randomUUID()}`,
    readUncommitted,
    maxWaitTimeInMs: 100,
  })
  const out = []
  await consumer.connect()
  try {
    await consumer.subscribe({ topic, fromBeginning: true })
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs)
      const check = () => {
        if (out.length < count || behind.size > 0) return
        clearTimeout(timer)
        resolve()
      }
      // A batch that reached the partition's end (lag 0, transaction
      // markers included) at or past the watermark seen at the start.
      consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
        if (payload.offsetLag === '0' && Number(payload.highWatermark) >= behind.get(payload.partition)) behind.delete(payload.partition)
        check()
      })
      consumer.run({
        eachMessage: async ({ partition, message }) => {
          const headers = {}
          for (const [name, value] of Object.entries(message.headers ?? {})) headers[name] = value?.toString()
          out.push({ partition, offset: Number(message.offset), key: message.key?.toString() ?? null, value: message.value?.toString() ?? null, headers })
        },
      })
    })
  } finally {
    await consumer.disconnect()
  }
  return out
}

module.exports = { startKafka, startKafkaCluster, fetchKafka, consumeAll }

if (require.main === module) {
  const args = process.argv.slice(2)
  const started = Date.now()
  if (args.includes('--fetch')) {
    fetchKafka({ log: (line) => process.stderr.write(line + '\n') }).then((classpath) => {
      process.stdout.write(`Kafka classpath ready (${classpath.split(path.delimiter).length} jars, ${Date.now() - started} ms)\n`)
    }, (error) => {
      process.stderr.write(error.stack + '\n')
      process.exitCode = 1
    })
  } else {
    // `node test/helpers/kafka-broker.js` runs a broker until Ctrl-C.
    startKafka().then((broker) => {
      process.stdout.write(`Kafka on ${broker.brokers[0]} (pid ${broker.pid}, ${Date.now() - started} ms, log ${broker.logFile})\n`)
      const stop = () => broker.close().then(() => process.exit(0))
      process.once('SIGINT', stop)
      process.once('SIGTERM', stop)
    }, (error) => {
      process.stderr.write(error.stack + '\n')
      process.exitCode = 1
    })
  }
}
