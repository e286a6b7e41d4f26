import { expectError, expectType } from 'tsd'
import { createHttpSink, type HttpSinkStats, type HttpDispatcherHandle, type HttpStats } from '.'
import type { LookupAddress } from 'node:dns'
import { wrapProducer, wrapStatsd, type RecordMetadata, createBatcher, createDnsCache, createStatsd, install, installed, uninstall, errors, type BatcherStats, type DnsCache, type DnsStats, type Installation, type StatsdStats } from '.'

const sink = createHttpSink({ url: 'https://logs.test/ingest', headers: { authorization: 'Bearer x' }, compression: 'gzip' })
expectType<Promise<void>>(sink.push({ msg: 'hi' }))
expectType<HttpSinkStats>(sink.stats())
expectType<Promise<void>>(sink.close({ timeoutMs: 1000 }))
expectError(createHttpSink({ url: 'https://logs.test/', format: 'xml' }))
expectError(createHttpSink({ url: 'https://logs.test/', lingerMS: 5 }))
expectError(createHttpSink({}))

const handle = install({ dns: { maxTtlMs: 60_000, servers: ['127.0.0.1:53'], hostsFile: null } })
expectType<Installation>(handle)
expectType<DnsCache | null>(handle.dns)
expectType<boolean>(uninstall())
expectType<Installation | null>(installed())
expectType<Installation>(install({ dns: false }))
expectError(install({ dns: { maxTTL: 5 } }))
expectError(install({ dns: { maxTtlMs: '5' } }))

const withHttp = install({ http: { connections: 64, requestTimeoutMs: null, learnIdleClose: false, statusRetries: true } })
expectType<HttpDispatcherHandle | null>(withHttp.http)
expectType<number>(withHttp.http!.stats().retries.staleSocket)
expectType<HttpStats>(withHttp.http!.stats())
expectType<boolean>(withHttp.http!.stats().global)
expectType<boolean>(withHttp.http!.stats().composed)
expectType<number | null>(withHttp.http!.stats().connectionsOpened)
expectType<Installation>(install({ http: false }))
expectError(install({ http: { connection: 64 } }))
expectError(install({ http: { requestTimeoutMs: '5s' } }))
expectError(install({ http: { statusRetries: 'yes' } }))

const cache = createDnsCache({ minTtlMs: 0 })
expectType<DnsStats>(cache.stats())
expectType<number>(cache.stats().searchLearned)
expectType<number>(cache.stats().requeries)
expectType<boolean>(cache.connectFailed('api.internal', '10.0.0.7'))
cache.lookup('example.test', (err, address, family) => {
  expectType<NodeJS.ErrnoException | null>(err)
  expectType<string>(address)
  expectType<number>(family)
})
cache.lookup('example.test', { all: true }, (err, addresses) => {
  expectType<NodeJS.ErrnoException | null>(err)
  expectType<LookupAddress[]>(addresses)
})
expectType<Promise<LookupAddress>>(cache.lookupAsync('example.test'))
expectType<Promise<LookupAddress[]>>(cache.lookupAsync('example.test', { all: true }))

const code: string = new errors.ERR_IO_HYGIENE_CLOSED('batcher').code
expectType<string>(code)

const batcher = createBatcher<string, number>({ send: async (items) => items.map((s) => s.length), maxBatchItems: 10, lingerMs: 5, maxQueueWaitMs: 1000 })
expectType<Promise<number>>(batcher.push('x'))
expectType<Array<Promise<number>>>(batcher.pushAll(['x', 'y']))
expectType<BatcherStats>(batcher.stats())
expectError(createBatcher<string>({ send: async () => {}, overflow: 'drop' }))

const statsd = createStatsd({ host: 'statsd.test', port: 8125, maxBufferSize: 1432 })
statsd.increment('requests')
expectType<Promise<void>>(statsd.close())
expectType<StatsdStats>(statsd.stats())
expectError(createStatsd({ cacheDns: true }))
expectError(createStatsd({ isChild: true }))
createStatsd({ global_tags: ['env:test'] })
createStatsd({ maxBufferSize: null })

declare const platformaticProducer: import('@platformatic/kafka').Producer<string, string, string, string>
const wrappedPlatformatic = wrapProducer(platformaticProducer, { lingerMs: 5 })
expectType<Promise<import('.').PlatformaticProduceResult>>(wrappedPlatformatic.send({ messages: [{ topic: 't', key: 'k', value: 'v' }], acks: -1 }))
expectType<bigint | undefined>((await wrappedPlatformatic.send({ messages: [{ topic: 't', value: 'v' }] })).offsets?.[0].offset)
expectType<Promise<void>>(wrappedPlatformatic.close({ timeoutMs: 1000 }))
expectError(wrappedPlatformatic.send({ messages: [{ value: 'v' }] }))
expectError(wrappedPlatformatic.sendBatch)

declare const kafkajsProducer: import('kafkajs').Producer
const producer = wrapProducer(kafkajsProducer, { lingerMs: 5, maxBatchItems: 500 })
expectType<'patched' | 'off' | 'not-installed' | 'not-found' | 'loaded-too-early' | 'unknown-version'>(producer.stats().kafkajsPatch)
expectType<boolean>(producer.stats().batching)
expectType<number>(producer.stats().retried)
install({ kafkajs: false })
expectType<boolean>(install().options.kafkajs)
expectType<Promise<RecordMetadata[]>>(producer.send({ topic: 't', messages: [{ value: 'v' }] }))
expectType<Promise<void>>(producer.flush({ timeoutMs: 1000 }))
expectError(wrapProducer(kafkajsProducer, { linger: 5 }))
wrapProducer(kafkajsProducer, { flushOnSignals: false, shutdownTimeoutMs: 25_000 })
expectError(wrapProducer(kafkajsProducer, { flushOnSignals: 'yes' }))
producer.send({ topic: 't', messages: [{ key: Buffer.from('k'), value: null, partition: 0, headers: { h: ['a', Buffer.from('b')] }, timestamp: '0' }] })
expectError(producer.send({ topic: 't', messages: [42] }))
expectError(producer.send({ topic: 't', messages: [{ key: 'k' }] }))
expectError(producer.sendBatch({ topicMessages: [{ topic: 't', messages: [{ value: 5 }] }] }))

// hot-shots' full type, when the project has it; the built-in surface otherwise.
const full = createStatsd<import('hot-shots').StatsD>({ host: 'statsd.test' })
full.increment('requests', 1, ['a:b'])
expectType<StatsdStats>(full.stats())
statsd.increment('requests', { route: '/users' })
expectError(createStatsd({ host: 123 }))
expectError(createStatsd({ protocol: 'http' }))
expectType<Promise<void>>(wrapStatsd(new (require('hot-shots'))() as import('hot-shots').StatsD).close())

// monitor
import { createMonitor, createOtelProducer, histogram, Histogram, type Monitor, type MonitorSample, type MonitorAlert } from '.'
import { MeterProvider, PeriodicExportingMetricReader, InMemoryMetricExporter, AggregationTemporality } from '@opentelemetry/sdk-metrics'
import { LoggerProvider } from '@opentelemetry/sdk-logs'
const monitor = createMonitor({ intervalMs: 1000, conditions: ['GetAddrInfoReqWrap > 100 for 3 samples', { when: 'elu > 0.9', for: 3, profile: false }], logger: console })
expectType<MonitorSample>(monitor.sample())
expectType<number>(monitor.sample().requestsByType.GetAddrInfoReqWrap)
expectType<number>(monitor.sample().histograms[0].count)
expectType<Record<string, string>>(monitor.sample().histograms[0].labels)
expectType<string>(monitor.report())
expectType<Promise<void>>(monitor.close())
expectError(createMonitor({ interval: 1000 }))
{
  const meterProvider = new MeterProvider()
  const loggerProvider = new LoggerProvider()
  expectType<Monitor>(createMonitor({ meterProvider, loggerProvider }))
  expectType<Monitor>(createMonitor({ meter: meterProvider.getMeter('app') }))
  expectType<Monitor>(createMonitor({ otel: true }))
  expectError(createMonitor({ otel: 1 }))
  expectError(createMonitor({ meterProvider: {} }))
  expectType<Monitor>(createMonitor({ meterProvider, otelHistograms: false }))
  expectError(createMonitor({ otelHistograms: 'no' }))
  const reader = new PeriodicExportingMetricReader({ exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE), metricProducers: [createOtelProducer()] })
  expectType<PeriodicExportingMetricReader>(reader)
}
expectError(createMonitor({ conditions: [{ metric: 'elu' }] }))
const lookups = histogram('dns.lookup', { source: 'upstream' })
lookups.record(1.5)
expectType<number>(lookups.percentile(99))
expectType<Histogram>(new Histogram().merge(lookups.toJSON()))
expectType<string | null>(({} as MonitorAlert).fix)
install({ monitor: { intervalMs: 500 } })
expectType<import('.').Monitor | null>(installed()!.monitor)

// Every rejection of a wrapped producer's send() says whether its messages may have been written.
declare const sendError: import('.').KafkaSendError
expectType<false | true | 'unknown'>(sendError.written)

// install()'s stats() and options, each module's own type (null or false when it is off).
import type { InstallationStats, KafkajsPatchStatus, MonitorStats } from '.'
{
  const installation = install()
  const { dns, http, monitor, kafkajs } = installation.stats()
  expectType<InstallationStats>(installation.stats())
  expectType<DnsStats | null>(dns)
  expectType<number | undefined>(dns?.misses)
  expectType<HttpStats | null>(http)
  expectType<MonitorStats | null>(monitor)
  expectType<KafkajsPatchStatus | undefined>(kafkajs?.status)
  // @ts-expect-error: null when the module is off, in code or by IO_HYGIENE_DNS=0
  expectType<number>(dns.misses)
  const options = installation.options
  if (options.dns) expectType<number>(options.dns.maxTtlMs)
  if (options.http) expectType<number>(options.http.connections)
  if (options.monitor) expectType<number>(options.monitor.intervalMs)
  expectType<boolean>(options.kafkajs === false)
  expectError(options.dns.maxTtlMs)
}

// createBatcher() takes its item and result types from send().
{
  interface Row { payload: Buffer }
  const rows = createBatcher({ send: async (items: Row[]) => items.map(() => 'stored'), sizeOf: (row) => row.payload.length })
  expectType<Promise<string>>(rows.push({ payload: Buffer.from('x') }))
  expectError(rows.push(42))
  // Left to neither a typed send() nor a type argument, items are any, as in JavaScript.
  const loose = createBatcher({ send: async (items) => items.map(() => 1), sizeOf: (row) => row.payload.length })
  expectType<Promise<number>>(loose.push({ payload: Buffer.from('x') }))
}

// closeAll(): the server's close first, then every client, one deadline.
import { closeAll } from '.'
expectType<Promise<void>>(closeAll({ timeoutMs: 20_000, before: async () => {} }))
expectType<Promise<void>>(closeAll())
expectError(closeAll({ timeoutMS: 20_000 }))
