'use strict'

// The monitor through the real OpenTelemetry SDK: a MeterProvider whose
// reader is the Prometheus exporter, scraped over loopback as Prometheus
// would; alerts through the real logs SDK.
const t = require('tap')
const path = require('node:path')
const http = require('node:http')
const dns = require('node:dns')
const { execFile } = require('node:child_process')
const { MeterProvider, MetricReader, AggregationTemporality } = require('@opentelemetry/sdk-metrics')
const { PrometheusExporter } = require('@opentelemetry/exporter-prometheus')
const { createMonitor } = require('..')
const { histogram, series } = require('../lib/metrics/registry')
const { BOUNDARIES } = require('../lib/monitor/outputs/otel')

const QUIET = { intervalMs: 2 ** 31 - 1, conditions: [] }

// A provider with the Prometheus exporter as its reader, and its endpoint
// served on a loopback port of our own. scrape() answers the text.
async function scraped (t, readers = [], metricProducers = []) {
  const exporter = new PrometheusExporter({ preventServerStart: true, metricProducers })
  const meterProvider = new MeterProvider({ readers: [exporter, ...readers] })
  const server = http.createServer((req, res) => exporter.getMetricsRequestHandler(req, res))
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    await new Promise((resolve) => server.close(resolve))
    await meterProvider.shutdown()
  })
  const url = `http://127.0.0.1:${server.address().port}/metrics`
  const scrape = async () => {
    const res = await fetch(url)
    return res.text()
  }
  return { meterProvider, scrape }
}

// The value of one series in Prometheus text, or undefined.
function value (text, name, labels = {}) {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue
    const open = line.indexOf('{')
    const close = line.lastIndexOf('}')
    const found = {}
    for (const m of line.slice(open + 1, close).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) found[m[1]] = m[2]
    if (Object.entries(labels).every(([k, v]) => found[k] === v)) return Number(line.slice(close + 2))
  }
  return undefined
}

t.test('a flood of uncached lookups shows as GetAddrInfoReqWrap requests, not as a handle', async (t) => {
  const { meterProvider, scrape } = await scraped(t)
  const monitor = createMonitor({ ...QUIET, meterProvider })
  t.teardown(() => monitor.close())

  t.notMatch(await scrape(), /io_hygiene_active_requests/, 'before the first sample, nothing: a collection never samples')
  t.equal(monitor.stats().samples, 0, 'and the scrape took none')

  // Node's own dns.lookup: every call is a getaddrinfo on the thread pool,
  // all of them in flight until this function returns.
  const FLOOD = 200
  const done = []
  for (let i = 0; i < FLOOD; i++) done.push(new Promise((resolve) => dns.lookup('localhost', () => resolve())))
  monitor.sample()
  await Promise.all(done)

  const text = await scrape()
  const requests = value(text, 'io_hygiene_active_requests', { type: 'GetAddrInfoReqWrap', otel_scope_name: 'io-hygiene' })
  t.ok(requests >= FLOOD, `${requests} GetAddrInfoReqWrap requests in the sample`)
  t.equal(value(text, 'io_hygiene_active_handles', { type: 'GetAddrInfoReqWrap' }), undefined, 'and no such handle')
  t.ok(value(text, 'io_hygiene_active_handles', { type: 'TCPServerWrap' }) >= 1, 'the exporter\'s server is a handle')
  t.match(text, /^# UNIT io_hygiene_active_requests \{request\}$/m, 'unit {request}')
  for (const name of ['nodejs_eventloop_delay_p50', 'nodejs_eventloop_delay_p99', 'nodejs_eventloop_delay_max', 'nodejs_eventloop_utilization']) {
    t.ok(value(text, name, { otel_scope_name: 'io-hygiene' }) >= 0, `${name} after the semantic conventions`)
  }
  t.match(text, /^# UNIT nodejs_eventloop_delay_p99 s$/m, 'delay in seconds')
  t.ok(value(text, 'process_memory_usage') > 0, 'rss as process.memory.usage')

  // The lookups are done, but no sample was taken since: the scrape reads the latest.
  t.equal(value(await scrape(), 'io_hygiene_active_requests', { type: 'GetAddrInfoReqWrap' }), requests, 'a second scrape reads the same sample')
  t.equal(monitor.stats().samples, 1, 'scrapes took no sample')

  monitor.sample()
  t.equal(value(await scrape(), 'io_hygiene_active_requests', { type: 'GetAddrInfoReqWrap' }), 0, 'gone in the next sample: the type falls to 0')
})

t.test('the operation histograms carry what the modules recorded, in our buckets', async (t) => {
  const fs = require('node:fs')
  const { createBatcher } = require('..')
  const { meterProvider, scrape } = await scraped(t)
  const monitor = createMonitor({ ...QUIET, meterProvider })
  t.teardown(() => monitor.close())

  const batcher = createBatcher({ name: 'otel-feed', maxBatchItems: 1, send: async () => { await fs.promises.stat(__filename) } })
  t.teardown(() => batcher.close())
  for (let i = 0; i < 5; i++) await batcher.push(`line ${i}`)
  const cache = histogram('dns.lookup', { source: 'otel-test' })
  cache.recordZero()
  cache.record(0.3)
  cache.record(1.5)
  cache.record(1.7)
  monitor.sample()

  const text = await scrape()
  const mine = (kind, labels) => series().find((s) => s.kind === kind && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).histogram
  for (const [kind, labels] of [['batch.flush', { batcher: 'otel-feed', outcome: 'ok' }], ['batch.queue_wait', { batcher: 'otel-feed' }], ['dns.lookup', { source: 'otel-test' }]]) {
    const name = `io_hygiene_${kind.replaceAll('.', '_')}_duration`
    const h = mine(kind, labels)
    t.equal(value(text, `${name}_count`, labels), h.count, `${kind}: every record counted`)
    t.ok(Math.abs(value(text, `${name}_sum`, labels) - h.sumMs / 1000) < 1e-9, `${kind}: the sum, in seconds`)
    // Cumulative counts at each of our boundaries equal ours.
    let cumulative = 0
    for (let i = 0; i < BOUNDARIES.length; i++) {
      cumulative += h.buckets[i]
      t.equal(value(text, `${name}_bucket`, { ...labels, le: String(BOUNDARIES[i]) }), cumulative, `${kind}: le ${BOUNDARIES[i]}`)
    }
  }
  t.equal(value(text, 'io_hygiene_batch_flush_duration_count', { batcher: 'otel-feed', outcome: 'ok' }), 5, 'one flush per item')
  t.match(text, /^# TYPE io_hygiene_dns_lookup_duration histogram$/m)

  // Only what was gained since is recorded again.
  cache.record(40)
  monitor.sample()
  monitor.sample()
  const again = await scrape()
  t.equal(value(again, 'io_hygiene_dns_lookup_duration_count', { source: 'otel-test' }), 5, 'each record once')
  t.equal(value(again, 'io_hygiene_dns_lookup_duration_bucket', { source: 'otel-test', le: '0.065536' }), 5, '40 ms under 65.536 ms')
  t.equal(value(again, 'io_hygiene_dns_lookup_duration_bucket', { source: 'otel-test', le: '0.032768' }), 4, 'and above 32.768 ms')
})

// A reader with delta temporality reports only what callbacks observed in
// its collection: after close(), nothing of the monitor's.
class DeltaReader extends MetricReader {
  constructor () {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.DELTA })
  }

  async onForceFlush () {}
  async onShutdown () {}
}

async function observed (reader) {
  const { resourceMetrics } = await reader.collect()
  return resourceMetrics.scopeMetrics.flatMap((s) => s.metrics.filter((m) => m.dataPoints.length > 0 && m.descriptor.name !== 'io_hygiene.dns.lookup.duration').map((m) => m.descriptor.name))
}

t.test('otelHistograms: false and createOtelProducer(): the same histograms, copied at each collection', async (t) => {
  const { createOtelProducer } = require('..')
  const { meterProvider, scrape } = await scraped(t, [], [createOtelProducer()])
  const monitor = createMonitor({ ...QUIET, meterProvider, otelHistograms: false })
  t.teardown(() => monitor.close())
  const h = histogram('batch.queue_wait', { batcher: 'otel-producer' })
  for (let i = 0; i < 1000; i++) h.record(i / 100)
  h.record(100_000) // past the last boundary (67.1 s): counted in +Inf
  monitor.sample()
  const text = await scrape()
  const labels = { batcher: 'otel-producer', otel_scope_name: 'io-hygiene' }
  t.equal(value(text, 'io_hygiene_batch_queue_wait_duration_count', labels), 1001, 'every record')
  t.ok(Math.abs(value(text, 'io_hygiene_batch_queue_wait_duration_sum', labels) - h.sumMs / 1000) < 1e-9, 'the sum, in seconds')
  let cumulative = 0
  for (let i = 0; i < BOUNDARIES.length; i++) {
    cumulative += h.buckets[i]
    t.equal(value(text, 'io_hygiene_batch_queue_wait_duration_bucket', { ...labels, le: String(BOUNDARIES[i]) }), cumulative, `le ${BOUNDARIES[i]}`)
  }
  t.equal(value(text, 'io_hygiene_batch_queue_wait_duration_bucket', { ...labels, le: '+Inf' }), 1001)
  t.equal(text.match(/^# TYPE io_hygiene_batch_queue_wait_duration histogram$/gm).length, 1, 'once: the monitor recorded none through the meter')
  t.ok(value(text, 'io_hygiene_active_handles', { type: 'TCPServerWrap' }) >= 1, 'the observable instruments are still the monitor\'s')
})

t.test('close() unregisters the callbacks; the histograms stop growing', async (t) => {
  const delta = new DeltaReader()
  const { meterProvider, scrape } = await scraped(t, [delta])
  const monitor = createMonitor({ ...QUIET, meterProvider })
  const h = histogram('dns.lookup', { source: 'otel-close' })
  h.record(2)
  monitor.sample()
  const before = await scrape()
  t.ok(value(before, 'nodejs_eventloop_utilization') >= 0, 'published while open')
  t.ok((await observed(delta)).includes('io_hygiene.active_handles'), 'observed while open')
  await monitor.close()
  h.record(2)
  t.same(await observed(delta), [], 'no callback runs after close()')
  const after = await scrape()
  t.equal(value(after, 'nodejs_eventloop_utilization'), value(before, 'nodejs_eventloop_utilization'), 'a cumulative reader keeps the last values it saw')
  t.equal(value(after, 'io_hygiene_dns_lookup_duration_count', { source: 'otel-close' }), 1, 'nothing recorded after close()')
  t.throws(() => monitor.sample(), { code: 'ERR_IO_HYGIENE_CLOSED' })
})

t.test('a meter of the user\'s own works as a provider does', async (t) => {
  const { meterProvider, scrape } = await scraped(t)
  const monitor = createMonitor({ ...QUIET, meter: meterProvider.getMeter('my-app') })
  t.teardown(() => monitor.close())
  monitor.sample()
  t.ok(value(await scrape(), 'io_hygiene_active_handles', { otel_scope_name: 'my-app', type: 'TCPServerWrap' }) >= 1, 'under the user\'s scope')
})

t.test('alerts become log records only when a logger provider is given', async (t) => {
  const { LoggerProvider, SimpleLogRecordProcessor, InMemoryLogRecordExporter } = require('@opentelemetry/sdk-logs')
  const exporter = new InMemoryLogRecordExporter()
  const loggerProvider = new LoggerProvider({ processors: [new SimpleLogRecordProcessor({ exporter })] })
  t.teardown(() => loggerProvider.shutdown())
  const lines = []
  const monitor = createMonitor({ intervalMs: 2 ** 31 - 1, conditions: ['heapUsedBytes > 1'], loggerProvider, logger: { warn: (line) => lines.push(line) } })
  t.teardown(() => monitor.close())
  monitor.sample()
  const records = exporter.getFinishedLogRecords()
  t.equal(records.length, 1, 'one record per alert')
  const [record] = records
  t.equal(record.severityText, 'WARN')
  t.equal(record.severityNumber, 13)
  t.equal(record.instrumentationScope.name, 'io-hygiene')
  t.match(record.body, /heapUsedBytes > 1/)
  t.same({ ...record.attributes, 'io_hygiene.value': 0 }, {
    'io_hygiene.condition': 'heapUsedBytes > 1',
    'io_hygiene.metric': 'heapUsedBytes',
    'io_hygiene.value': 0,
    'io_hygiene.threshold': 1,
    'io_hygiene.samples': 1,
  })
  t.ok(record.attributes['io_hygiene.value'] > 1, 'the value that fired it')
  t.equal(lines.length, 1, 'the logger still gets its line')

  const flood = createMonitor({ intervalMs: 2 ** 31 - 1, conditions: ['GetAddrInfoReqWrap > 10'], loggerProvider })
  t.teardown(() => flood.close())
  const done = []
  for (let i = 0; i < 20; i++) done.push(new Promise((resolve) => dns.lookup('localhost', () => resolve())))
  flood.sample()
  await Promise.all(done)
  const fix = exporter.getFinishedLogRecords()[1]
  t.match(fix.attributes, { 'io_hygiene.metric': 'GetAddrInfoReqWrap', 'io_hygiene.fix': /dns/ }, 'the fix, when there is one')

  const plain = createMonitor({ intervalMs: 2 ** 31 - 1, conditions: ['heapUsedBytes > 1'] })
  t.teardown(() => plain.close())
  plain.sample()
  t.equal(exporter.getFinishedLogRecords().length, 2, 'without one, no record')
})

// Before any test loads @opentelemetry/api through the output (Node then
// caches the resolution).
t.test('otel: true needs @opentelemetry/api, and says so', async (t) => {
  const Module = require('node:module')
  const file = require.resolve('../lib/monitor/outputs/otel')
  const cached = require.cache[file]
  delete require.cache[file]
  const resolveFilename = Module._resolveFilename
  Module._resolveFilename = function (request, ...rest) {
    if (request === '@opentelemetry/api') throw Object.assign(new Error('Cannot find module \'@opentelemetry/api\''), { code: 'MODULE_NOT_FOUND' })
    return resolveFilename.call(this, request, ...rest)
  }
  t.teardown(() => {
    Module._resolveFilename = resolveFilename
    require.cache[file] = cached
  })
  t.throws(() => createMonitor({ ...QUIET, otel: true }),
    { code: 'ERR_IO_HYGIENE_MISSING_PEER', message: /@opentelemetry\/api/, cause: { code: 'MODULE_NOT_FOUND' } })
})

t.test('otel: true follows the global meter provider, set before or after', async (t) => {
  const { metrics } = require('@opentelemetry/api')
  t.teardown(() => metrics.disable())
  const h = histogram('dns.lookup', { source: 'otel-global' })
  h.record(3)
  const monitor = createMonitor({ ...QUIET, otel: true })
  t.teardown(() => monitor.close())
  monitor.sample() // into the no-op provider: nothing set yet
  const { meterProvider, scrape } = await scraped(t)
  metrics.setGlobalMeterProvider(meterProvider)
  h.record(5)
  monitor.sample()
  const text = await scrape()
  t.ok(value(text, 'io_hygiene_active_handles', { type: 'TCPServerWrap', otel_scope_name: 'io-hygiene' }) >= 1, 'published to the provider set later')
  t.equal(value(text, 'io_hygiene_dns_lookup_duration_count', { source: 'otel-global' }), 2, 'its histograms hold everything since the start')
})

t.test('options: one destination, objects of the right shape', async (t) => {
  const meterProvider = new MeterProvider()
  t.teardown(() => meterProvider.shutdown())
  t.throws(() => createMonitor({ meterProvider, meter: meterProvider.getMeter('x') }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS' })
  t.throws(() => createMonitor({ meterProvider, otel: true }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS' })
  t.throws(() => createMonitor({ meterProvider: {} }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION', message: /MeterProvider/ })
  t.throws(() => createMonitor({ meter: meterProvider }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION', message: /Meter/ })
  t.throws(() => createMonitor({ loggerProvider: console }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION', message: /LoggerProvider/ })
  t.throws(() => createMonitor({ otel: 'yes' }), { code: 'ERR_IO_HYGIENE_INVALID_OPTION' })
  const { install, installed } = require('..')
  t.throws(() => install({ dns: true, http: false, monitor: { otel: true, meterProvider } }), { code: 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS', message: /install\(\{ monitor \}\)/ })
  t.equal(installed(), null, 'refused before anything was installed')
})

function child (args, env) {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^io_?hyg/i.test(k)))
  return new Promise((resolve) => {
    execFile(process.execPath, args, { cwd: path.join(__dirname, '..'), env: { ...base, ...env }, timeout: 30_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? error.code : 0, out: stdout.trim() ? JSON.parse(stdout) : null, stderr })
    })
  })
}

const register = require.resolve('../register.js')

t.test('with the option off, no @opentelemetry module is loaded', async (t) => {
  const script = `
    const monitor = require('io-hygiene').install({ dns: false, http: false, monitor: { conditions: [] } }).monitor
    monitor.sample()
    const files = Object.keys(require.cache)
    process.stdout.write(JSON.stringify({
      otel: files.filter((f) => f.includes('@opentelemetry')),
      output: files.filter((f) => f.endsWith('lib/monitor/outputs/otel.js')),
      monitor: files.some((f) => f.endsWith('lib/monitor/index.js')),
    }))
  `
  const { code, out, stderr } = await child(['-e', script], {})
  t.equal(code, 0, stderr)
  t.ok(out.monitor, 'the monitor runs')
  t.same(out.otel, [], 'no @opentelemetry module')
  t.same(out.output, [], 'nor the OpenTelemetry output')
})

// -r io-hygiene/register runs before the application sets its SDK up: the
// monitor follows whichever provider is global at each sample.
t.test('IO_HYGIENE_MONITOR_OTEL=1 under -r io-hygiene/register publishes to the global provider', async (t) => {
  const script = `
    const { metrics } = require('@opentelemetry/api')
    const { MeterProvider, MetricReader } = require('@opentelemetry/sdk-metrics')
    class Reader extends MetricReader { async onForceFlush () {} async onShutdown () {} }
    const reader = new Reader()
    metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }))
    const monitor = require('io-hygiene').installed().monitor
    monitor.sample()
    reader.collect().then(({ resourceMetrics }) => {
      const names = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics.map((m) => s.scope.name + ' ' + m.descriptor.name))
      process.stdout.write(JSON.stringify({ names }))
    })
  `
  const { code, out, stderr } = await child(['-r', register, '-e', script], { IO_HYGIENE_DNS: '0', IO_HYGIENE_HTTP: '0', IO_HYGIENE_MONITOR_OTEL: '1' })
  t.equal(code, 0, stderr)
  t.ok(out.names.includes('io-hygiene io_hygiene.heap.used'), 'heap')
  t.ok(out.names.includes('io-hygiene nodejs.eventloop.delay.p99'), 'event-loop delay')
})

t.test('a second install({ monitor }) gives the installed monitor a MeterProvider and a LoggerProvider, once', async (t) => {
  const { install, uninstall } = require('..')
  const { LoggerProvider, SimpleLogRecordProcessor, InMemoryLogRecordExporter } = require('@opentelemetry/sdk-logs')
  t.teardown(() => uninstall())
  const handle = install({ dns: false, http: false, monitor: { ...QUIET, conditions: ['heapUsedBytes > 1'], warnOnAlert: false } })
  const { meterProvider, scrape } = await scraped(t)
  const exporter = new InMemoryLogRecordExporter()
  const loggerProvider = new LoggerProvider({ processors: [new SimpleLogRecordProcessor({ exporter })] })
  t.teardown(() => loggerProvider.shutdown())
  t.equal(install({ dns: false, http: false, monitor: { ...QUIET, conditions: ['heapUsedBytes > 1'], warnOnAlert: false, meterProvider, loggerProvider } }), handle)
  t.equal(handle.options.monitor.meterProvider, meterProvider)
  handle.monitor.sample()
  t.match(await scrape(), /^io_hygiene_heap_used\S*\{[^}]*\} \d+/m, 'the monitor publishes through the provider')
  t.equal(exporter.getFinishedLogRecords().length, 1, 'and its alert became a log record')

  // A monitor that has its metrics' place keeps it: another provider, or
  // otel: true, is ignored, and said so.
  const other = await scraped(t)
  const warnings = []
  const listener = (w) => warnings.push(w.message)
  process.on('warning', listener)
  t.teardown(() => process.removeListener('warning', listener))
  install({ dns: false, http: false, monitor: { ...QUIET, conditions: ['heapUsedBytes > 1'], warnOnAlert: false, meterProvider: other.meterProvider, loggerProvider } })
  await new Promise(setImmediate)
  t.equal(handle.options.monitor.meterProvider, meterProvider, 'the provider in use stays')
  t.match(warnings, [/ignored: monitor\.meterProvider \(asked an object, in use an object\)/])
  handle.monitor.sample()
  t.notMatch(await other.scrape(), /io_hygiene_heap_used/, 'nothing in the other provider')

  // A closed monitor takes nothing.
  await handle.monitor.close()
  install({ dns: false, http: false, monitor: { ...QUIET, conditions: ['heapUsedBytes > 1'], warnOnAlert: false, meterProvider, loggerProvider, logger: console } })
  t.equal(handle.options.monitor.logger, null, 'a closed monitor is given no logger')
})

t.test('otel: true from a second install() reaches a monitor that had no metrics output', async (t) => {
  const { install, uninstall } = require('..')
  t.teardown(() => uninstall())
  const handle = install({ dns: false, http: false, monitor: QUIET })
  install({ dns: false, http: false, monitor: { ...QUIET, otel: true } })
  t.equal(handle.options.monitor.otel, true)
})

t.test('a second install() that attaches a meter takes its otelHistograms with it: the histograms once, through the producer', async (t) => {
  const { install, uninstall, createOtelProducer } = require('..')
  t.teardown(() => uninstall())
  const handle = install({ dns: false, http: false, monitor: QUIET })
  const { meterProvider, scrape } = await scraped(t, [], [createOtelProducer()])
  const warnings = []
  const listener = (w) => warnings.push(w.message)
  process.on('warning', listener)
  t.teardown(() => process.removeListener('warning', listener))
  install({ dns: false, http: false, monitor: { ...QUIET, meterProvider, otelHistograms: false } })
  await new Promise(setImmediate)
  t.same(warnings, [], 'nothing ignored')
  t.equal(handle.options.monitor.otelHistograms, false)
  histogram('batch.queue_wait', { batcher: 'attached-producer' }).record(1)
  handle.monitor.sample()
  const text = await scrape()
  t.equal(text.match(/^# TYPE io_hygiene_batch_queue_wait_duration histogram$/gm)?.length, 1, 'once: the monitor recorded none through the meter')
})
