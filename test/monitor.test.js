'use strict'

// The monitor against real resources: sockets, timers and fs requests this
// test creates, a loop it blocks, a real UDP StatsD receiver, a prom-client
// registry, CPU profiles and heap snapshots read back from disk.
const t = require('tap')
const dc = require('node:diagnostics_channel')
const dgram = require('node:dgram')
const dns = require('node:dns')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')
const { execFile, spawn } = require('node:child_process')
const { Registry, collectDefaultMetrics } = require('prom-client')
const { createMonitor, createStatsd, closeAll, histogram, install, uninstall } = require('..')
const { startStatsdReceiver } = require('./helpers/statsd-receiver')
const { startDnsServer } = require('./helpers/dns-server')
const { eventually } = require('./helpers/wait')

const QUIET = { intervalMs: 2 ** 31 - 1, conditions: [] } // samples only when asked

function monitor (t, options) {
  const m = createMonitor({ ...QUIET, ...options })
  t.teardown(() => m.close())
  return m
}

function alerts (t) {
  const seen = []
  const listener = (alert) => seen.push(alert)
  dc.subscribe('io-hygiene:monitor:alert', listener)
  t.teardown(() => dc.unsubscribe('io-hygiene:monitor:alert', listener))
  return seen
}

function tmpdir (t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'io-hygiene-monitor-'))
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

function run (file, ...args) {
  return new Promise((resolve) => {
    execFile(process.execPath, [file, ...args], { timeout: 20_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (error.code ?? error.signal) : 0, stdout, stderr })
    })
  })
}

const delta = (after, before, byType, type) => (after[byType][type] ?? 0) - (before[byType][type] ?? 0)

t.test('options are validated with coded errors before anything starts', async (t) => {
  const bad = [
    [{ intervalMs: 5 }, 'ERR_IO_HYGIENE_OPTION_RANGE'],
    [{ intervalMs: '1000' }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ interval: 1000 }, 'ERR_IO_HYGIENE_UNKNOWN_OPTION'],
    [{ conditions: 'elu > 0.9' }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ logger: console.log }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ logger: {} }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ statsd: { gauge () {} } }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ registry: {} }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ profileDir: '' }, 'ERR_IO_HYGIENE_INVALID_OPTION'],
    [{ profileDurationMs: 0 }, 'ERR_IO_HYGIENE_OPTION_RANGE'],
  ]
  for (const [options, code] of bad) {
    t.throws(() => createMonitor(options), { code }, JSON.stringify(options))
  }
  t.throws(() => install({ monitor: { intervalMs: 5 } }), { code: 'ERR_IO_HYGIENE_OPTION_RANGE' })
  t.equal(require('..').installed(), null, 'nothing installed')
})

t.test('conditions parse, or fail with ERR_IO_HYGIENE_INVALID_CONDITION naming what is wrong', async (t) => {
  const { parseCondition } = require('../lib/monitor/conditions')
  const d = { cooldownMs: 1000 }
  const c = parseCondition('GetAddrInfoReqWrap > 100 for 3 samples', d)
  t.match(c, { name: 'GetAddrInfoReqWrap > 100 for 3 samples', metric: 'GetAddrInfoReqWrap', op: '>', threshold: 100, for: 3, cooldownMs: 1000, profile: true, heapSnapshot: false })
  const sample = { requestsByType: { GetAddrInfoReqWrap: 101 }, handlesByType: { Timeout: 2 }, elu: 0.95, delayP99Ms: 100 }
  t.ok(c.holds(sample))
  t.notOk(c.holds({ ...sample, requestsByType: {} }), 'a type not present counts 0')
  t.ok(parseCondition('Timeout>=2', d).holds(sample), 'handles by type too; spaces optional')
  t.ok(parseCondition('elu > 0.9', d).holds(sample))
  t.notOk(parseCondition('delayP99Ms < 100', d).holds(sample))
  t.ok(parseCondition('delayP99Ms <= 100 for 1 sample', d).holds(sample))
  t.match(parseCondition({ when: 'elu > 0.5 for 2 samples', for: 5, name: 'busy', cooldownMs: 0, profile: false, heapSnapshot: true }, d),
    { name: 'busy', for: 5, cooldownMs: 0, profile: false, heapSnapshot: true })
  const bad = [
    null, 5, ['elu > 1'], {}, { when: 5 }, { when: 'elu > 1', every: 2 }, 'elu', 'elu = 1', 'elu > x', 'elu > -1',
    'bogus > 1', 'elu > 1 for 0 samples', 'elu > 1 for 2', { when: 'elu > 1', for: 1.5 }, { when: 'elu > 1', cooldownMs: -1 },
    { when: 'elu > 1', profile: 'yes' }, { when: 'elu > 1', heapSnapshot: 1 }, { when: 'elu > 1', name: '' },
  ]
  for (const input of bad) {
    t.throws(() => parseCondition(input, d), { code: 'ERR_IO_HYGIENE_INVALID_CONDITION', name: 'TypeError' }, JSON.stringify(input))
  }
  t.throws(() => createMonitor({ conditions: ['elu > 0.9', 'nope'] }), { code: 'ERR_IO_HYGIENE_INVALID_CONDITION', message: /createMonitor\(\): condition "nope"/ })
})

t.test('a near miss of a resource type Node reports is refused: its condition could never fire', async (t) => {
  const { parseCondition } = require('../lib/monitor/conditions')
  const { RESOURCE_TYPES } = require('../lib/monitor/resource-types')
  const d = { cooldownMs: 0 }
  for (const [typo, meant] of [['GetAddrInfoReqWraps', 'GetAddrInfoReqWrap'], ['Getaddrinforeqwrap', 'GetAddrInfoReqWrap'], ['Timeouts', 'Timeout'], ['FsReqCallback', 'FSReqCallback'], ['TCPSockWrap', 'TCPSocketWrap']]) {
    t.throws(() => parseCondition(`${typo} > 100 for 3 samples`, d),
      { code: 'ERR_IO_HYGIENE_INVALID_CONDITION', message: `unknown resource type "${typo}" (did you mean ${meant}?` }, typo)
  }
  t.throws(() => createMonitor({ conditions: ['GetAddrInfoReqWraps > 100 for 3 samples'] }), { code: 'ERR_IO_HYGIENE_INVALID_CONDITION' })
  t.throws(() => parseCondition('TCPConnectWrap > 10', d),
    { code: 'ERR_IO_HYGIENE_INVALID_CONDITION', message: 'unknown resource type "TCPConnectWrap" (did you mean ConnectWrap?' }, 'an async_hooks name Node never reports')
  t.equal(parseCondition('SomeFutureWrap > 1', d).metric, 'SomeFutureWrap', 'a name far from every known type may be a newer Node\'s')
  // What this Node reports for the resources the test holds is known.
  const server = net.createServer()
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const accepted = new Promise((resolve) => server.once('connection', resolve))
  const client = net.connect(server.address().port, '127.0.0.1')
  await new Promise((resolve) => client.on('connect', resolve))
  const peer = await accepted
  const timer = setTimeout(() => {}, 60_000)
  const reading = fs.promises.readFile(__filename)
  const stat = new Promise((resolve) => fs.stat(__filename, resolve))
  const lookup = new Promise((resolve) => dns.lookup('localhost', resolve))
  const types = new Set(process.getActiveResourcesInfo())
  await Promise.all([reading, stat, lookup])
  clearTimeout(timer)
  peer.destroy()
  client.destroy()
  await Promise.all([peer, client].map((s) => new Promise((resolve) => s.once('close', resolve))))
  await new Promise((resolve) => server.close(resolve))
  for (const type of types) t.ok(RESOURCE_TYPES.includes(type), `${type} is a known type`)
})

t.test('requests and handles are counted by type, from resources this test creates', async (t) => {
  const m = monitor(t)
  const server = net.createServer()
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const before = m.sample()
  const accepted = new Promise((resolve) => server.once('connection', resolve))
  const client = net.connect(server.address().port, '127.0.0.1')
  await new Promise((resolve) => client.once('connect', resolve))
  const peer = await accepted
  const udp = dgram.createSocket('udp4')
  await new Promise((resolve) => udp.bind(0, '127.0.0.1', resolve))
  const timer = setTimeout(() => {}, 60_000)
  const unrefd = setTimeout(() => {}, 60_000).unref()
  t.teardown(() => {
    clearTimeout(timer)
    clearTimeout(unrefd)
    client.destroy()
    peer.destroy()
    udp.close()
    server.close()
  })
  // Requests stay active until their callbacks run: none can before this
  // synchronous sample.
  let done = 0
  for (let i = 0; i < 7; i++) fs.stat(__filename, () => done++)
  const after = m.sample()
  t.equal(delta(after, before, 'handlesByType', 'TCPSocketWrap'), 2, 'both ends of the connection')
  t.equal(delta(after, before, 'handlesByType', 'UDPWrap'), 1)
  t.equal(delta(after, before, 'handlesByType', 'Timeout'), 1, 'the ref\'d timer; the unref\'d one is invisible')
  t.equal(delta(after, before, 'requestsByType', 'FSReqCallback'), 7)
  t.equal(after.requests, Object.values(after.requestsByType).reduce((a, b) => a + b, 0))
  t.equal(after.handles, Object.values(after.handlesByType).reduce((a, b) => a + b, 0))
  t.ok(after.costUs > 0 && after.costUs < 1e6, `the monitor reports its own CPU per sample: ${after.costUs} µs`)
  t.ok(after.heapUsedBytes > 0 && after.heapTotalBytes >= after.heapUsedBytes && after.rssBytes > 0)
  t.same(JSON.parse(JSON.stringify(after)), after, 'plain data')
  await eventually(() => done === 7)

  // A write larger than the socket buffers stays in flight: the peer is not
  // reading.
  peer.pause()
  client.write(Buffer.alloc(16 << 20))
  const writing = m.sample()
  t.ok(writing.requestsByType.SimpleWriteWrap >= 1, 'SimpleWriteWrap')
})

t.test('libuv request names are requests, everything else a handle', async (t) => {
  const { isRequest } = require('../lib/monitor/resource-types')
  const requests = ['GetAddrInfoReqWrap', 'GetNameInfoReqWrap', 'FSReqCallback', 'FSReqPromise', 'WriteWrap',
    'SimpleWriteWrap', 'ShutdownWrap', 'SimpleShutdownWrap', 'SendWrap', 'ConnectWrap', 'CloseReq']
  const handles = ['TCPSocketWrap', 'TCPServerWrap', 'UDPWrap', 'PipeWrap', 'TTYWrap', 'Timeout', 'Immediate',
    'ProcessWrap', 'SignalWrap', 'FSEventWrap', 'StatWatcher', 'MessagePort']
  for (const name of requests) t.ok(isRequest(name), name)
  for (const name of handles) t.notOk(isRequest(name), name)
})

t.test('activeRequests() counts the libuv requests in flight, as the benchmarks read them', async (t) => {
  const { activeRequests, isRequest } = require('../lib/monitor/resource-types')
  const stat = new Promise((resolve) => fs.stat(__filename, resolve))
  const names = process.getActiveResourcesInfo()
  t.ok(names.includes('FSReqCallback'), 'an fs.stat() in flight is listed')
  t.equal(activeRequests(), names.filter(isRequest).length, 'every listed request counts, nothing else')
  t.ok(activeRequests() >= 1)
  await stat
})

t.test('c-ares queries are invisible: they are not libuv requests', async (t) => {
  const server = await startDnsServer()
  t.teardown(() => server.close())
  server.mode = 'blackhole'
  const m = monitor(t)
  const resolver = new dns.Resolver({ timeout: 5000, tries: 1 })
  resolver.setServers([server.server])
  const before = m.sample()
  const answered = new Promise((resolve) => resolver.resolve4('invisible.test', resolve))
  await eventually(() => server.queries > 0)
  const during = m.sample()
  // The test runner's own file and pipe writes come and go; nothing else
  // may appear.
  const runner = /^FSReq|WriteWrap$/
  const appeared = (byType) => Object.keys(during[byType]).filter((type) => !runner.test(type) && !(type in before[byType]))
  t.same(appeared('requestsByType'), [], 'the pending query adds no request type')
  t.same(appeared('handlesByType'), [], 'nor a handle type')
  t.notOk('QueryReqWrap' in during.requestsByType)
  resolver.cancel()
  await answered
})

function block (ms) {
  const end = Date.now() + ms
  while (Date.now() < end);
}

t.test('event-loop delay and utilisation are per window: a blocked loop shows, then the window resets', async (t) => {
  const m = monitor(t)
  m.sample()
  await new Promise((resolve) => setTimeout(() => { block(500); resolve() }, 20))
  // One more timers phase, so that the delay histogram's own timer has run.
  await new Promise((resolve) => setTimeout(resolve, 1))
  const blocked = m.sample()
  t.ok(blocked.delayMaxMs >= 400, `max ${blocked.delayMaxMs} ms for a 500 ms block`)
  t.ok(blocked.delayP99Ms >= 400, `p99 ${blocked.delayP99Ms} ms`)
  t.ok(blocked.delayP50Ms <= blocked.delayP99Ms)
  t.ok(blocked.elu > 0.5, `utilisation ${blocked.elu}`)
  const next = await eventually(async () => {
    await new Promise((resolve) => setTimeout(resolve, 50))
    const s = m.sample()
    return s.delayMaxMs < 400 && s
  })
  t.ok(next, 'the next window no longer holds the block')
  t.ok(next.elu < blocked.elu)
})

t.test('the timer samples on its own, and sees a loop blocked across its whole window', async (t) => {
  const seen = alerts(t)
  const m = monitor(t, { intervalMs: 50, conditions: [{ when: 'delayMaxMs > 300', name: 'blocked' }] })
  setTimeout(() => block(500), 10)
  await eventually(() => seen.some((a) => a.name === 'blocked'))
  const alert = seen.find((a) => a.name === 'blocked')
  t.ok(alert.value >= 400, `delay ${alert.value} ms`)
  t.ok(m.stats().samples >= 1)
})

t.test('a condition fires once per cooldown, logs once, and names no fix it does not have', async (t) => {
  const seen = alerts(t)
  const logged = []
  // 50 ref'd timers more than the process has now: present or not, as the test says.
  const base = monitor(t).sample().handlesByType.Timeout ?? 0
  const m = monitor(t, {
    logger: { warn: (line) => logged.push(line) },
    conditions: [
      { when: 'handles >= 0', name: 'always', cooldownMs: 3_600_000 },
      { when: `Timeout >= ${base + 50} for 2 samples`, name: 'timers', cooldownMs: 0 },
    ],
  })
  const withTimers = () => {
    const timers = Array.from({ length: 50 }, () => setTimeout(() => {}, 60_000))
    m.sample()
    for (const timer of timers) clearTimeout(timer)
  }
  withTimers() // streak 1
  withTimers() // streak 2: fires
  m.sample() // streak broken
  withTimers() // streak 1
  withTimers() // streak 2: fires again, cooldown 0
  withTimers() // streak 3: fires again
  t.equal(seen.filter((a) => a.name === 'always').length, 1, 'once in six samples, within its cooldown')
  t.equal(seen.filter((a) => a.name === 'timers').length, 3)
  t.equal(logged.length, 4, 'one log line per firing')
  t.match(logged[0], /^io-hygiene monitor: always \(handles \d+ >= 0\)$/)
  t.match(logged[1], /^io-hygiene monitor: timers \(Timeout \d+ >= \d+ for 2 samples\)$/)
  const alert = seen.find((a) => a.name === 'timers')
  t.match(alert, { metric: 'Timeout', op: '>=', threshold: base + 50, samples: 2, fix: null, profile: null, heapSnapshot: null })
  t.equal(alert.value, alert.sample.handlesByType.Timeout)
  t.ok(alert.value >= base + 50)
  t.equal(m.stats().alerts, 4)
  t.match(m.report(), /condition always: fired 1 times, holding for 6 samples/)
  t.match(m.report(), /condition timers: fired 3 times, holding for 3 samples/)
})

t.test('a firing condition writes a CPU profile that parses, one at a time', async (t) => {
  const dir = tmpdir(t)
  const seen = alerts(t)
  const m = createMonitor({
    ...QUIET,
    profileDir: path.join(dir, 'profiles'),
    profileDurationMs: 60_000,
    conditions: [
      { when: 'handles >= 0', name: 'first one' },
      { when: 'handles >= 0', name: 'second' },
      { when: 'handles >= 0', name: 'no profile', profile: false },
    ],
  })
  m.sample()
  t.equal(seen.length, 3)
  t.match(seen[0].profile, /profiles\/io-hygiene-first-one-.*\.cpuprofile$/)
  t.equal(seen[1].profile, null, 'a profile is in flight: none for the second')
  t.equal(seen[2].profile, null)
  t.match(m.stats(), { profiles: 1, profilesSkipped: 1 })
  block(50) // something to profile
  await m.close() // stops the profile early and writes it
  const profile = JSON.parse(fs.readFileSync(seen[0].profile, 'utf8'))
  t.ok(Array.isArray(profile.nodes) && profile.nodes.length > 0, 'nodes')
  t.ok(Array.isArray(profile.samples) && Array.isArray(profile.timeDeltas))
  t.ok(profile.endTime > profile.startTime)
  t.same(fs.readdirSync(path.join(dir, 'profiles')), [path.basename(seen[0].profile)], 'no temporary file left')
  t.throws(() => m.sample(), { code: 'ERR_IO_HYGIENE_CLOSED' })
  await m.close()
})

t.test('a profile ends by itself after profileDurationMs; a write error is counted and logged', async (t) => {
  const dir = tmpdir(t)
  const seen = alerts(t)
  const logged = []
  const m = monitor(t, { profileDir: dir, profileDurationMs: 20, conditions: ['handles >= 0'], logger: { warn: (l) => logged.push(l) } })
  m.sample()
  await eventually(() => fs.existsSync(seen[0].profile))
  t.ok(JSON.parse(fs.readFileSync(seen[0].profile, 'utf8')).nodes)

  const file = path.join(dir, 'not-a-dir')
  fs.writeFileSync(file, '')
  const broken = monitor(t, { profileDir: file, profileDurationMs: 20, conditions: ['handles >= 0'], logger: { warn: (l) => logged.push(l) } })
  broken.sample()
  await eventually(() => broken.stats().errors === 1)
  t.match(logged.at(-1), /^io-hygiene monitor: .*ENOTDIR|EEXIST/)
})

t.test('a heap snapshot is opt-in and size-capped', async (t) => {
  const dir = tmpdir(t)
  const seen = alerts(t)
  const capped = monitor(t, { heapSnapshotDir: dir, heapSnapshotMaxBytes: 0, conditions: [{ when: 'handles >= 0', heapSnapshot: true }] })
  capped.sample()
  t.equal(seen[0].heapSnapshot, null)
  t.match(capped.stats(), { heapSnapshots: 0, heapSnapshotsSkipped: 1 })
  const off = monitor(t, { heapSnapshotDir: dir, conditions: ['handles >= 0'] })
  off.sample()
  t.equal(seen[1].heapSnapshot, null, 'not asked for by the condition')
  // A real one in a child: in this process's large heap it takes seconds.
  const { code, stdout, stderr } = await run(path.join(__dirname, 'fixtures', 'monitor-heap.js'), path.join(dir, 'snap'))
  t.equal(code, 0, stderr)
  const [file, stats, report] = stdout.trim().split('\n').map((line) => JSON.parse(line))
  t.match(stderr, /^io-hygiene monitor: heap \(handles \d+ >= 0\); heap snapshot: .*\.heapsnapshot\n$/, 'logged once')
  t.match(report, /^active requests 0$/m)
  t.match(file, /snap\/io-hygiene-heap-.*\.heapsnapshot$/)
  t.match(fs.readFileSync(file, 'utf8').slice(0, 20), /^\{"snapshot":/)
  t.match(stats, { heapSnapshots: 1, heapSnapshotsSkipped: 0 })
})

t.test('profiles and snapshots are created exclusively, 0600 in 0700 directories, never through a planted file', async (t) => {
  const { startProfile, heapSnapshot, busy } = require('../lib/monitor/actions')
  const dir = tmpdir(t)
  const seen = alerts(t)
  const m = monitor(t, { profileDir: path.join(dir, 'new', 'profiles'), profileDurationMs: 1, conditions: ['handles >= 0'] })
  m.sample()
  await eventually(() => fs.existsSync(seen[0].profile))
  t.equal(fs.statSync(seen[0].profile).mode & 0o777, 0o600, 'the profile is the user\'s alone')
  t.equal(fs.statSync(path.join(dir, 'new')).mode & 0o777, 0o700, 'and so are the directories made for it')
  t.equal(fs.statSync(path.join(dir, 'new', 'profiles')).mode & 0o777, 0o700)
  t.same(fs.readdirSync(path.join(dir, 'new', 'profiles')), [path.basename(seen[0].profile)], 'nothing else left behind')

  // A file planted at the name, world-writable, and a symlink to a victim.
  const planted = path.join(dir, 'io-hygiene-planted.heapsnapshot')
  fs.writeFileSync(planted, '')
  fs.chmodSync(planted, 0o666)
  t.throws(() => heapSnapshot(planted, 0, Infinity), { code: 'EEXIST' })
  t.equal(fs.statSync(planted).size, 0, 'the planted file received nothing')
  const victim = path.join(dir, 'victim')
  fs.writeFileSync(victim, 'keep me')
  const link = path.join(dir, 'io-hygiene-link.cpuprofile')
  fs.symlinkSync(victim, link)
  const failed = []
  t.notOk(busy())
  const hold = setInterval(() => {}, 1000) // the profile's own timer is unref'd
  t.equal(await startProfile(t, link, 1, (err) => failed.push(err)), null)
  clearInterval(hold)
  t.match(failed, [{ code: 'EEXIST' }])
  t.equal(fs.readFileSync(victim, 'utf8'), 'keep me', 'the symlink\'s target is untouched')
  t.same(fs.readdirSync(dir).sort(), ['io-hygiene-link.cpuprofile', 'io-hygiene-planted.heapsnapshot', 'new', 'victim'])
})

t.test('the files in a directory are capped in count and bytes, said once', async (t) => {
  const dir = tmpdir(t)
  const seen = alerts(t)
  const logged = []
  for (const name of ['io-hygiene-a.cpuprofile', 'io-hygiene-b.heapsnapshot']) fs.writeFileSync(path.join(dir, name), 'x'.repeat(10))
  fs.writeFileSync(path.join(dir, 'not-ours.txt'), 'x'.repeat(1000))
  fs.mkdirSync(path.join(dir, 'io-hygiene-a-directory.cpuprofile'))
  const conditions = [{ when: 'handles >= 0', heapSnapshot: true }]
  const full = monitor(t, { profileDir: dir, heapSnapshotDir: dir, maxFilesPerDir: 2, cooldownMs: 0, conditions, logger: { warn: (l) => logged.push(l) } })
  full.sample()
  full.sample()
  t.same(seen.map((a) => [a.profile, a.heapSnapshot]), [[null, null], [null, null]])
  t.match(full.stats(), { profiles: 0, profilesSkipped: 2, heapSnapshots: 0, heapSnapshotsSkipped: 2, errors: 0 })
  t.equal(logged.filter((l) => /holds maxFilesPerDir \(2\) files or maxBytesPerDir/.test(l)).length, 1, 'said once')
  const bytes = monitor(t, { profileDir: dir, maxBytesPerDir: 20, conditions: ['handles >= 0'] })
  bytes.sample()
  t.equal(seen[2].profile, null, 'at maxBytesPerDir of our files, whatever else the directory holds')
  t.same(fs.readdirSync(dir).sort(), ['io-hygiene-a-directory.cpuprofile', 'io-hygiene-a.cpuprofile', 'io-hygiene-b.heapsnapshot', 'not-ours.txt'])
})

t.test('an output that throws is counted, never thrown', async (t) => {
  const m = monitor(t, {
    statsd: { gauge () { throw new Error('statsd down') }, increment () {} },
    logger: { warn () { throw new Error('logger down') } },
    conditions: ['handles >= 0'],
  })
  const sample = m.sample()
  t.type(sample.requests, 'number')
  t.equal(m.stats().errors, 2, 'the logger and the StatsD client')
})

t.test('gauges and window histograms reach a real StatsD receiver', async (t) => {
  const receiver = await startStatsdReceiver()
  t.teardown(() => receiver.close())
  const client = createStatsd({ host: '127.0.0.1', port: receiver.port })
  const m = monitor(t, { statsd: client })
  const h = histogram('test.statsd', { outcome: 'ok' })
  for (let i = 0; i < 10; i++) h.record(3)
  const statted = new Promise((resolve) => fs.stat(__filename, resolve))
  const sample = m.sample()
  await statted
  t.ok(sample.requestsByType.FSReqCallback >= 1)
  m.sample() // nothing recorded in this window: no histogram lines
  for (let i = 0; i < 5; i++) h.record(7)
  m.sample() // only what was recorded since the last window
  await client.close()
  await receiver.waitFor((r) => r.find('nodejs.monitor.cost_us').length === 3)
  const gauge = (name) => receiver.find(name)[0]
  t.match(gauge('nodejs.active_requests'), { type: 'g', value: String(sample.requests) })
  t.match(gauge('nodejs.active_handles'), { type: 'g', value: String(sample.handles) })
  for (const [type, n] of Object.entries(sample.requestsByType)) {
    t.ok(receiver.find('nodejs.active_requests.by_type').some((l) => l.value === String(n) && l.tags.includes(`type:${type}`)), type)
  }
  for (const [type, n] of Object.entries(sample.handlesByType)) {
    t.ok(receiver.find('nodejs.active_handles.by_type').some((l) => l.value === String(n) && l.tags.includes(`type:${type}`)), type)
  }
  for (const name of ['event_loop.delay.p50_ms', 'event_loop.delay.p99_ms', 'event_loop.delay.max_ms', 'event_loop.utilization',
    'heap.used_bytes', 'heap.total_bytes', 'rss_bytes']) {
    t.equal(receiver.find(`nodejs.${name}`).length, 3, name)
  }
  t.equal(gauge('nodejs.gc.count').type, 'c')
  t.same(receiver.find('nodejs.test.statsd.count').map((l) => [l.type, l.value, l.tags]), [['c', '10', ['outcome:ok']], ['c', '5', ['outcome:ok']]])
  t.same(receiver.find('nodejs.test.statsd.p99_ms').map((l) => l.value), ['3', '7'])
  t.ok(receiver.packets < receiver.lines, `batched: ${receiver.lines} lines in ${receiver.packets} packets`)
})

t.test('the monitor sends nothing to a client that is closing: closeAll() leaves droppedAfterClose at 0', async (t) => {
  const receiver = await startStatsdReceiver()
  t.teardown(() => receiver.close())
  const client = createStatsd({ host: '127.0.0.1', port: receiver.port })
  t.teardown(() => client.close())
  const m = monitor(t, { statsd: client })
  m.sample()
  await closeAll()
  for (let i = 0; i < 3; i++) m.sample()
  t.equal(m.stats().samples, 4)
  t.equal(client.stats().droppedAfterClose, 0, 'no sample written to the closed client')
  t.equal(m.stats().errors, 0)
  t.equal(receiver.find('nodejs.monitor.cost_us').length, 1, 'the sample before the close was sent')
})

t.test('the monitor\'s samples do not hold a SIGTERM\'s drain: the process ends long before shutdownTimeoutMs', async (t) => {
  const receiver = await startStatsdReceiver()
  t.teardown(() => receiver.close())
  const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'monitor-statsd-signal.js'), String(receiver.port)], { stdio: ['ignore', 'pipe', 'inherit'] })
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })))
  t.teardown(() => child.kill('SIGKILL'))
  await new Promise((resolve) => child.stdout.on('data', (d) => { if (String(d).includes('ready')) resolve() }))
  t.ok(await receiver.waitFor((r) => r.find('nodejs.monitor.cost_us').length >= 3), 'the monitor samples into the client')
  child.kill('SIGTERM')
  // shutdownTimeoutMs is 24 days: any exit is the drain ending on its own.
  // The bound only keeps a failing run from hanging the suite.
  let timer
  const bound = new Promise((resolve) => { timer = setTimeout(resolve, 30_000, 'still running') })
  t.teardown(() => clearTimeout(timer))
  t.same(await Promise.race([exited, bound]), { code: null, signal: 'SIGTERM' }, 'it died of the signal once its own metrics were sent')
  t.equal(receiver.find('app.started').length, 1)
})

t.test('a registry that throws part way keeps none of the monitor\'s metrics', async (t) => {
  const registry = new Registry()
  const register = registry.registerMetric.bind(registry)
  let calls = 0
  registry.registerMetric = (m) => {
    if (++calls === 5) throw new Error('registry full')
    register(m)
  }
  t.throws(() => createMonitor({ ...QUIET, registry }), { message: 'registry full' })
  t.equal(registry.getMetricsAsArray().length, 0, 'the four registered before the throw are gone')
  registry.registerMetric = register
  monitor(t, { registry })
  t.match(await registry.metrics(), /io_hygiene_active_requests/, 'the next monitor registers')
})

t.test('a second monitor on the same prom-client registry gets a coded error saying what to do', async (t) => {
  const registry = new Registry()
  const first = monitor(t, { registry })
  const before = process.getActiveResourcesInfo().length
  t.throws(() => createMonitor({ ...QUIET, registry }), {
    code: 'ERR_IO_HYGIENE_ALREADY_REGISTERED',
    message: /already holds io_hygiene_active_requests: one monitor per registry\. Close the monitor that registered it first/,
  })
  t.equal(process.getActiveResourcesInfo().length, before, 'the refused monitor left no timer behind')
  t.match(await registry.metrics(), /io_hygiene_active_requests/, 'the first still serves')
  await first.close()
  monitor(t, { registry })
  t.match(await registry.metrics(), /io_hygiene_active_requests/, 'after close(), another may register')
})

t.test('a prom-client registry exposes the sample and the histograms under Prometheus names', async (t) => {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  const h = histogram('test.prom', { outcome: 'ok' })
  h.record(3)
  const m = createMonitor({ ...QUIET, registry })
  const text = await registry.metrics() // before any sample: the scrape takes one
  t.match(text, /^# TYPE io_hygiene_active_handles gauge$/m)
  t.match(text, /^io_hygiene_active_handles\{type="[A-Za-z]+"\} \d+$/m)
  t.match(text, /^# TYPE io_hygiene_event_loop_delay_p99_seconds gauge$/m)
  t.match(text, /^io_hygiene_event_loop_utilization_ratio [\d.e-]+$/m)
  t.match(text, /^io_hygiene_heap_used_bytes \d+$/m)
  t.match(text, /^io_hygiene_resident_memory_bytes \d+$/m)
  t.match(text, /^# TYPE io_hygiene_gc_pause_seconds_total counter$/m)
  t.match(text, /^io_hygiene_monitor_cpu_seconds_total [\d.e-]+$/m)
  t.match(text, /^# TYPE io_hygiene_test_prom_seconds histogram$/m)
  t.match(text, /^io_hygiene_test_prom_seconds_bucket\{outcome="ok",le="0.002048"\} 0$/m)
  t.match(text, /^io_hygiene_test_prom_seconds_bucket\{outcome="ok",le="0.004096"\} 1$/m)
  t.match(text, /^io_hygiene_test_prom_seconds_bucket\{outcome="ok",le="\+Inf"\} 1$/m)
  t.match(text, /^io_hygiene_test_prom_seconds_sum\{outcome="ok"\} 0.003$/m)
  t.match(text, /^io_hygiene_test_prom_seconds_count\{outcome="ok"\} 1$/m)
  t.match(text, /^nodejs_active_handles/m, 'beside prom-client\'s own default metrics, no name clash')

  histogram('test.prom.later').record(1)
  m.sample()
  t.match(await registry.metrics(), /^io_hygiene_test_prom_later_seconds_count 1$/m, 'a kind recorded later appears after a sample')
  await m.close()
  t.notMatch(await registry.metrics(), /io_hygiene_/, 'close() unregisters')
})

t.test('install({ monitor }) runs one monitor, configured from code or IO_HYGIENE_MONITOR_*', async (t) => {
  t.teardown(() => {
    delete process.env.IO_HYGIENE_MONITOR_CONDITIONS
    delete process.env.IO_HYGIENE_MONITOR_INTERVAL_MS
    uninstall()
  })
  const off = install({ dns: false })
  t.equal(off.monitor, null, 'off by default')
  uninstall()
  process.env.IO_HYGIENE_MONITOR_CONDITIONS = 'FSReqCallback > 1000 for 2 samples,elu > 1'
  process.env.IO_HYGIENE_MONITOR_INTERVAL_MS = '60000'
  const handle = install({ dns: false, monitor: true })
  t.same(handle.options.monitor.conditions, ['FSReqCallback > 1000 for 2 samples', 'elu > 1'])
  t.equal(handle.options.monitor.intervalMs, 60000)
  const sample = handle.monitor.sample()
  t.type(sample.requests, 'number')
  const stats = handle.stats()
  t.equal(stats.monitor.sample, sample, 'the handle\'s stats() holds the monitor\'s latest sample')
  t.match(stats.monitor, { samples: 1, alerts: 0 })
  t.equal(stats.dns, null, 'a module that is off')
  t.match(handle.monitor.report(), /condition FSReqCallback > 1000 for 2 samples: quiet/)
  const { monitor } = handle
  uninstall()
  t.throws(() => monitor.sample(), { code: 'ERR_IO_HYGIENE_CLOSED' }, 'uninstall() closed it')
})

t.test('every sample is published on io-hygiene:monitor:sample', async (t) => {
  const published = []
  const listener = (sample) => published.push(sample)
  dc.subscribe('io-hygiene:monitor:sample', listener)
  t.teardown(() => dc.unsubscribe('io-hygiene:monitor:sample', listener))
  const m = monitor(t)
  const sample = m.sample()
  t.same(published, [sample])
})

t.test('report() reads at a glance', async (t) => {
  const m = monitor(t, { conditions: ['elu > 2'] })
  histogram('test.report', { source: 'upstream' }).record(0.25)
  histogram('test.report.empty') // nothing recorded: not shown
  const text = m.report() // no sample yet: takes one
  t.match(text, /^io-hygiene monitor at .* \(every \d+ ms; this sample took \d+ µs\)$/m)
  t.match(text, /^active requests \d+/m)
  t.match(text, /^active handles \d+, \w+ \d+/m)
  t.match(text, /^event-loop delay p50 [\d.]+ ms, p99 [\d.]+ ms, max [\d.]+ ms; utilisation [\d.]+$/m)
  t.match(text, /^heap [\d.]+ MiB used of [\d.]+ MiB; rss [\d.]+ MiB; GC \d+ runs, [\d.]+ ms$/m)
  t.match(text, /^condition elu > 2: quiet$/m)
  t.match(text, /^test\.report source=upstream: 1 recorded, p50 0\.25 ms, p99 0\.25 ms\n {6}value \(µs\)/m)
  histogram('test.report.odd').record(24.493734000000018)
  histogram('test.report.long').record(1234.5678)
  const more = m.report()
  t.match(more, /^test\.report\.odd: 1 recorded, p50 (\d{2}\.\d|\d{2}) ms, p99 (\d{2}\.\d|\d{2}) ms$/m, 'three significant digits')
  t.match(more, /^test\.report\.long: 1 recorded, p50 \d{4} ms, p99 \d{4} ms$/m, 'whole milliseconds from 100 up')
  t.match(text, /^ +128 \|@{40} 1$/m, '250 µs in [128, 256)')
  t.notMatch(text, /test\.report\.empty/)
})

t.test('the monitor never keeps a process alive', async (t) => {
  const dir = tmpdir(t)
  const fixture = path.join(__dirname, 'fixtures', 'monitor-exit.js')
  const { code, stdout, stderr } = await run(fixture, dir)
  t.equal(code, 0, stderr)
  t.equal(stdout, 'done\n')
})

// -r io-hygiene/register with the monitor on from the environment only.
function runAlertFixture (env, flags = []) {
  const args = [...flags, '-r', require.resolve('../register.js'), path.join(__dirname, 'fixtures', 'monitor-alert.js')]
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^io_?hyg/i.test(k)))
  return new Promise((resolve) => {
    // Without the test runner's hooks, whose loader thread runs -r once more.
    execFile('/bin/sh', ['-c', 'unset NODE_OPTIONS; exec "$0" "$@"', process.execPath, ...args], {
      env: { ...base, IO_HYGIENE_MONITOR: '1', IO_HYGIENE_MONITOR_INTERVAL_MS: '20', IO_HYGIENE_MONITOR_CONDITIONS: 'Timeout > 0', ...env },
      timeout: 30_000,
    }, (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stdout, stderr }))
  })
}

t.test('a monitor an output refuses leaves nothing running: no sampler, no metrics in the registry', async (t) => {
  const r = await run(path.join(__dirname, 'fixtures', 'monitor-failed-output.js'))
  t.equal(r.code, 0, r.stderr)
  const out = JSON.parse(r.stdout)
  t.equal(out.refused, 21, 'each createMonitor() threw the provider\'s error')
  t.equal(out.registered, 0, 'the registry given with it holds none of its metrics')
  t.equal(out.published, out.samples, 'only the healthy monitor samples')
})

// The monitor of -r or --import io-hygiene/register, and outputs from code.
function runAttach (flags, file) {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^io_?hyg/i.test(k)))
  return new Promise((resolve) => {
    execFile('/bin/sh', ['-c', 'unset NODE_OPTIONS; exec "$0" "$@"', process.execPath, ...flags, path.join(__dirname, 'fixtures', file)], {
      cwd: path.join(__dirname, '..'),
      env: { ...base, IO_HYGIENE_MONITOR: '1', IO_HYGIENE_MONITOR_INTERVAL_MS: '60000' },
      timeout: 30_000,
    }, (error, stdout, stderr) => resolve({ code: error ? error.code : 0, stdout, stderr }))
  })
}

t.test('a second install({ monitor }) gives the -r or --import monitor a registry, a StatsD client and a logger', async (t) => {
  for (const [flags, file] of [[['-r', 'io-hygiene/register'], 'monitor-attach.js'], [['--import', 'io-hygiene/register'], 'monitor-attach.mjs']]) {
    const r = await runAttach(flags, file)
    t.equal(r.code, 0, r.stderr)
    t.same(JSON.parse(r.stdout), {
      preloaded: true,
      same: true,
      prometheus: true,
      statsd: true,
      logged: 0,
      options: { registry: true, logger: true },
      warnings: [],
    }, `${flags.join(' ')}: one monitor, fed by the code's outputs, nothing ignored`)
  }
})

t.test('a second install({ monitor }) attaches what the monitor lacks and names what it keeps', async (t) => {
  t.teardown(() => uninstall())
  const first = new Registry()
  const handle = install({ dns: false, http: false, monitor: { ...QUIET, registry: first } })
  const lines = []
  const logger = { warn: (line) => lines.push(line) }
  logger.self = logger // circular, as a real logger often is
  const second = new Registry()
  const warnings = []
  const listener = (w) => warnings.push(w)
  process.on('warning', listener)
  t.teardown(() => process.removeListener('warning', listener))
  const again = install({ dns: false, http: false, monitor: { ...QUIET, registry: second, logger } })
  await new Promise(setImmediate)
  t.equal(again, handle)
  t.equal(handle.options.monitor.logger, logger, 'the logger was attached')
  t.equal(handle.options.monitor.registry, first, 'the registry in use stays')
  t.notMatch(await second.metrics(), /io_hygiene_/, 'nothing registered in the other registry')
  t.equal(warnings.length, 1)
  t.match(warnings[0].message, /ignored: monitor\.registry \(asked an object, in use an object\)\./)
  t.notMatch(warnings[0].message, /io_hygiene_|warn|self/, 'no object\'s insides')
})

t.test('a preloaded monitor\'s fix never says to preload; one installed from code\'s does', async (t) => {
  const { installMonitor, spec } = require('../lib/monitor')
  const { resolve } = require('../lib/core/options')
  install({ http: false }) // the dns module on
  t.teardown(() => uninstall())
  for (const preloaded of [true, false]) {
    const lines = []
    const o = resolve('test', spec, { ...QUIET, conditions: ['GetAddrInfoReqWrap >= 0'], logger: { warn: (line) => lines.push(line) } })
    const { value: m, undo } = installMonitor(o, { preloaded })
    t.teardown(undo)
    m.sample()
    t.equal(lines.length, 1)
    if (preloaded) t.match(lines[0], /loaded before the application/)
    t.equal(/load with node -r/.test(lines[0]), !preloaded, preloaded ? 'preloaded: not told to preload' : 'from code: told to preload')
  }
})

t.test('a second install({ monitor }) attaches a StatsD client and a logger in place', async (t) => {
  t.teardown(() => uninstall())
  const handle = install({ dns: false, http: false, monitor: { ...QUIET, conditions: ['heapUsedBytes > 1'], warnOnAlert: false } })
  const gauges = []
  const statsd = { gauge: (name) => gauges.push(name), increment () {} }
  const lines = []
  const logger = { warn: (line) => lines.push(line) }
  install({ dns: false, http: false, monitor: { ...QUIET, conditions: ['heapUsedBytes > 1'], warnOnAlert: false, statsd, statsdPrefix: 'app.', logger } })
  handle.monitor.sample()
  t.ok(gauges.includes('app.active_requests'), 'the client gets the gauges, under its prefix')
  t.match(lines, [/heapUsedBytes > 1/], 'the logger gets the alert')
  t.equal(handle.options.monitor.statsdPrefix, 'app.')
})

t.test('a refused output undoes the ones attached before it; the second install() warns by code, never throws', async (t) => {
  t.teardown(() => uninstall())
  const handle = install({ dns: false, http: false, monitor: QUIET })
  const registry = new Registry()
  const { MeterProvider } = require('@opentelemetry/sdk-metrics')
  const meterProvider = new MeterProvider()
  const loggerProvider = { getLogger () { throw new Error('no logger secret=abc') } }
  const warnings = []
  const listener = (w) => warnings.push(w)
  process.on('warning', listener)
  t.teardown(() => process.removeListener('warning', listener))
  t.equal(install({ dns: false, http: false, monitor: { ...QUIET, registry, meterProvider, loggerProvider } }), handle)
  await new Promise(setImmediate)
  t.equal(registry.getMetricsAsArray().length, 0, 'the registry holds none of its metrics')
  t.equal(handle.options.monitor.registry, null, 'nothing attached')
  t.equal(handle.options.monitor.meterProvider, null)
  t.equal(warnings.length, 1)
  t.match(warnings[0], { code: 'IO_HYGIENE_ALREADY_INSTALLED', message: /ignored: monitor outputs \(not attached: an error\)/ })
  t.notMatch(warnings[0].message, /secret/, 'the output\'s own message is not shown')
  // A registry another monitor holds: its code, not a throw.
  const held = new Registry()
  const other = createMonitor({ ...QUIET, registry: held })
  t.teardown(() => other.close())
  t.equal(install({ dns: false, http: false, monitor: { ...QUIET, registry: held } }), handle)
  await new Promise(setImmediate)
  t.match(warnings[1], { message: /not attached: ERR_IO_HYGIENE_ALREADY_REGISTERED/ })
  await meterProvider.shutdown()
})

t.test('a plain install() after an attach says nothing of the outputs it left unset', async (t) => {
  t.teardown(() => uninstall())
  install({ dns: false, http: false, monitor: QUIET })
  install({ dns: false, http: false, monitor: { ...QUIET, registry: new Registry(), logger: { warn () {} } } })
  const warnings = []
  const listener = (w) => warnings.push(w)
  process.on('warning', listener)
  t.teardown(() => process.removeListener('warning', listener))
  install({ dns: false, http: false, monitor: QUIET })
  await new Promise(setImmediate)
  t.same(warnings, [], 'nothing asked differs')
})

t.test('an alert\'s fix depends on how io-hygiene was loaded', async (t) => {
  const env = { IO_HYGIENE_MONITOR_CONDITIONS: 'GetAddrInfoReqWrap >= 0' }
  const r = await runAlertFixture(env)
  t.equal(r.code, 0, r.stderr)
  t.match(r.stderr, /IO_HYGIENE_MONITOR_ALERT.*GetAddrInfoReqWrap >= 0.*loaded before the application/)
  t.notMatch(r.stderr, /load with node -r/, 'never told to load the way it was loaded')
})

t.test('IO_HYGIENE_MONITOR=1 alone: an alert reaches stderr as a process warning', async (t) => {
  const r = await runAlertFixture({})
  t.equal(r.code, 0, r.stderr)
  t.equal(r.stdout, 'done\n')
  t.match(r.stderr, /\[IO_HYGIENE_MONITOR_ALERT\] IoHygieneWarning: io-hygiene monitor: Timeout > 0 \(Timeout 1 > 0\)/)
  const off = await runAlertFixture({ IO_HYGIENE_MONITOR_WARN_ON_ALERT: '0' })
  t.equal(off.code, 0, off.stderr)
  t.notMatch(off.stderr, /IO_HYGIENE_MONITOR_ALERT/, 'warnOnAlert 0 silences it')
  const disabled = await runAlertFixture({}, ['--disable-warning=IO_HYGIENE_MONITOR_ALERT'])
  t.equal(disabled.stdout, 'done\n', disabled.stderr)
  t.notMatch(disabled.stderr, /IO_HYGIENE_MONITOR_ALERT/, 'as does Node\'s --disable-warning')
})
