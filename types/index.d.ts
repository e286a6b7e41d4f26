/// <reference types="node" />
import type { LookupAddress, LookupAllOptions, LookupOneOptions, LookupOptions } from 'node:dns'
import type { SocketOptions } from 'node:dgram'
// No import of hot-shots or kafkajs: they are optional peers, and a project
// without one of them must still type-check without skipLibCheck. What we
// need of their shapes is declared here, structurally.

export type ErrorCode =
  | 'ERR_IO_HYGIENE_UNKNOWN_OPTION'
  | 'ERR_IO_HYGIENE_INVALID_OPTION'
  | 'ERR_IO_HYGIENE_OPTION_RANGE'
  | 'ERR_IO_HYGIENE_CONFLICTING_OPTIONS'
  | 'ERR_IO_HYGIENE_INVALID_ARGUMENT'
  | 'ERR_IO_HYGIENE_INVALID_ENV'
  | 'ERR_IO_HYGIENE_UNKNOWN_ENV'
  | 'ERR_IO_HYGIENE_QUEUE_FULL'
  | 'ERR_IO_HYGIENE_CLOSED'
  | 'ERR_IO_HYGIENE_NOT_CONNECTED'
  | 'ERR_IO_HYGIENE_KAFKA_SEND_FAILED'
  | 'ERR_IO_HYGIENE_UNSUPPORTED_PRODUCER'
  | 'ERR_IO_HYGIENE_TIMEOUT'
  | 'ERR_IO_HYGIENE_DELIVERY_TIMEOUT'
  | 'ERR_IO_HYGIENE_ITEM_TOO_LARGE'
  | 'ERR_IO_HYGIENE_INVALID_RESULT'
  | 'ERR_IO_HYGIENE_MISSING_PEER'
  | 'ERR_IO_HYGIENE_INVALID_CONDITION'
  | 'ERR_IO_HYGIENE_HTTP_STATUS'
  | 'ERR_IO_HYGIENE_ALREADY_REGISTERED'

export interface IoHygieneError extends Error {
  code: ErrorCode
}

/** Every ERR_IO_HYGIENE_* error class, by code. */
export declare const errors: { readonly [K in ErrorCode]: new (...args: any[]) => IoHygieneError }

export interface DnsOptions {
  /** Names kept (least recently used dropped first). Default 10000. */
  maxEntries?: number
  /** Shortest time an answer is kept, whatever its TTL says. Default 1000. */
  minTtlMs?: number
  /** Longest time an answer is kept, whatever its TTL says. Default 300000. */
  maxTtlMs?: number
  /** Lifetime of answers DNS gave no TTL for (hosts file, search domains). Default 10000. */
  fallbackTtlMs?: number
  /** How long past its TTL an answer may be served while DNS fails. Default 86400000. */
  staleTtlMs?: number
  /** How long an error is cached, and the wait between failed refreshes. Default 1000. */
  errorTtlMs?: number
  /** Timeout of each try (2 tries) of a TTL query, and of a c-ares query in `servers` mode. Default 2000. */
  queryTimeoutMs?: number
  /** Interval of the sweep that drops entries no longer servable. Default 60000. */
  sweepIntervalMs?: number
  /** Ask these DNS servers with c-ares instead of the system resolver. Default null. */
  servers?: string[] | null
  /** The hosts file consulted first; names it lists never cause a DNS query. null for none. Default /etc/hosts. */
  hostsFile?: string | null
}

export interface DnsStats {
  hits: number
  misses: number
  coalesced: number
  staleServed: number
  negativeHits: number
  fallbacks: number
  refreshes: number
  /** getaddrinfo calls. */
  upstreamLookups: number
  /** DNS queries that learn which name answered and its TTL (search tries included). */
  ttlQueries: number
  /** DNS queries of refreshes that asked the learned name directly. */
  refreshQueries: number
  /** Refreshes whose DNS answer was the cached one: kept, no getaddrinfo. */
  refreshesKept: number
  /** Learning queries for search-list names that did not have the answer. */
  searchTries: number
  /** Names learned as answered through a search domain. */
  searchLearned: number
  /** Failed connections (refused, unreachable, timed out) to an address the cache gave out. */
  connectFailures: number
  /** Resolutions those failures started: at most one per entry per minTtlMs. */
  requeries: number
  /** upstreamLookups + ttlQueries + refreshQueries. */
  upstreamQueries: number
  errors: Record<string, number>
  entries: number
}

export interface LookupFunction {
  (hostname: string, family: number, callback: (err: NodeJS.ErrnoException | null, address: string, family: number) => void): void
  (hostname: string, options: LookupOneOptions, callback: (err: NodeJS.ErrnoException | null, address: string, family: number) => void): void
  (hostname: string, options: LookupAllOptions, callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void): void
  (hostname: string, options: LookupOptions, callback: (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family: number) => void): void
  (hostname: string, callback: (err: NodeJS.ErrnoException | null, address: string, family: number) => void): void
}

export interface LookupAsyncFunction {
  (hostname: string, family: number): Promise<LookupAddress>
  (hostname: string, options: LookupOneOptions): Promise<LookupAddress>
  (hostname: string, options: LookupAllOptions): Promise<LookupAddress[]>
  (hostname: string, options: LookupOptions): Promise<LookupAddress | LookupAddress[]>
  (hostname: string): Promise<LookupAddress>
}

export interface DnsCache {
  /** dns.lookup's contract, answered from the cache. */
  readonly lookup: LookupFunction
  /** dns.promises.lookup's contract, answered from the cache. */
  readonly lookupAsync: LookupAsyncFunction
  readonly closed: boolean
  stats(): DnsStats
  /**
   * A connection to `address`, which the cache gave out for `hostname`, could
   * not be made: the name is resolved again before the address is handed out
   * again (at most once per minTtlMs). Returns whether a resolution started or
   * was joined. The installed cache learns of failed connections by itself.
   */
  connectFailed(hostname: string, address: string): boolean
  clear(): void
  close(): void
}

export declare function createDnsCache(options?: DnsOptions): DnsCache

export interface InstallOptions {
  /** The dns.lookup cache; false leaves dns.lookup alone. Default true. */
  dns?: boolean | DnsOptions
  /** The monitor; off by default. */
  monitor?: boolean | MonitorOptions
  /** undici's global dispatcher (fetch, undici.fetch, undici.request); false leaves it alone. Default true. */
  http?: boolean | HttpOptions
  /** kafkajs 2.2.x's producer retry and grouping corrected before kafkajs loads; false leaves kafkajs as it ships. Default true. */
  kafkajs?: boolean
}

/**
 * Each module's options in effect, false for a module that is off. A module
 * asked for in code may still be off: IO_HYGIENE_<MODULE>=0 wins.
 */
export interface InstalledOptions {
  readonly kafkajs: boolean
  readonly dns: false | Readonly<Required<DnsOptions>>
  readonly http: false | Readonly<Required<HttpOptions>>
  readonly monitor: false | Readonly<Required<MonitorOptions>>
}

/** Each module's stats(), null for a module that is off (in code, or by IO_HYGIENE_<MODULE>=0). */
export interface InstallationStats {
  readonly kafkajs: { readonly status: KafkajsPatchStatus } | null
  readonly dns: DnsStats | null
  readonly http: HttpStats | null
  readonly monitor: MonitorStats | null
}

export interface Installation {
  /** The installed cache, or null when the dns module is off. */
  readonly dns: DnsCache | null
  /** The monitor, or null when it is off (the default). */
  readonly monitor: Monitor | null
  /** The installed dispatcher, or null when the http module is off. */
  readonly http: HttpDispatcherHandle | null
  /** The options in effect (IO_HYGIENE_* variables over code, defaults for the rest). */
  readonly options: InstalledOptions
  /** Every module's stats(), null for a module that is off; the monitor's holds its latest sample. */
  stats(): InstallationStats
  /** Same as the top-level uninstall(). */
  uninstall(): boolean
}

/** Patches process-wide behaviour; idempotent for the same options. */
export declare function install(options?: InstallOptions): Installation
/** Undoes install(); false if someone wrapped a patched function after us. */
export declare function uninstall(): boolean
/** The current installation, or null. */
export declare function installed(): Installation | null

// batch

export interface BatcherSendInfo { group: unknown; attempt: number }

export interface BatcherOptions<T, R = unknown> {
  send: (items: T[], info: BatcherSendInfo) => Promise<R[] | void> | R[] | void
  name?: string
  lingerMs?: number
  maxBatchItems?: number
  maxBatchBytes?: number
  maxQueuedItems?: number
  maxQueuedBytes?: number
  overflow?: 'wait' | 'reject'
  maxQueueWaitMs?: number
  maxWaitingItems?: number
  maxWaitingBytes?: number
  concurrency?: number
  deliveryTimeoutMs?: number
  retryBackoffMs?: number
  maxRetryBackoffMs?: number
  flushWhenIdle?: boolean
  flushOnSignals?: boolean
  shutdownTimeoutMs?: number
  sizeOf?: (item: T) => number
  groupOf?: ((item: T) => unknown) | null
  isRetriable?: (err: unknown) => boolean
}

export interface BatcherStats {
  queued: number
  queuedBytes: number
  waiting: number
  inFlight: number
  batchesInFlight: number
  flushed: number
  rejected: number
  dropped: number
  retried: number
  flushes: number
  flushErrors: number
}

export interface Batcher<T, R = unknown> {
  readonly name: string
  readonly closed: boolean
  push(item: T): Promise<R>
  /** push() for each item, but they stand or fall together: refused together unless all fit ('reject'), or admitted together once all fit ('wait'). */
  pushAll(items: readonly T[]): Array<Promise<R>>
  flush(options?: { timeoutMs?: number | null }): Promise<void>
  close(options?: { timeoutMs?: number | null }): Promise<void>
  stats(): BatcherStats
}

/**
 * The item type comes from `send`'s parameter (`send: async (rows: Row[]) => ...`)
 * or a type argument; left to neither, items are `any`, as in JavaScript.
 */
export declare function createBatcher<T = any, R = unknown>(options: BatcherOptions<T, R>): Batcher<T, R>

// statsd

export type StatsdTags = { [key: string]: string | number } | string[]
/** `error.code` is set for io-hygiene's own errors (ERR_IO_HYGIENE_CLOSED after close()) and the socket's. */
export type StatsdCallback = (error?: Error & { readonly code?: string }, bytes?: number) => void
/** hot-shots' metric call: (stat, value?, sampleRate?, tags?, callback?), each after stat optional. */
export type StatsdMetric = (
  stat: string | string[],
  value?: number | string | StatsdTags | StatsdCallback,
  sampleRate?: number | StatsdTags | StatsdCallback,
  tags?: StatsdTags | StatsdCallback,
  callback?: StatsdCallback
) => void

/**
 * The hot-shots client surface, declared here so that hot-shots' types are
 * not needed. With hot-shots installed, ask for its full type:
 * `createStatsd<import('hot-shots').StatsD>(options)`.
 */
export interface StatsdClient {
  increment: StatsdMetric
  decrement: StatsdMetric
  gauge: StatsdMetric
  gaugeDelta: StatsdMetric
  histogram: StatsdMetric
  distribution: StatsdMetric
  timing: StatsdMetric
  set: StatsdMetric
  unique: StatsdMetric
  event(title: string, text?: string, options?: Record<string, unknown>, tags?: StatsdTags, callback?: StatsdCallback): void
  check(name: string, status: number, options?: Record<string, unknown>, tags?: StatsdTags, callback?: StatsdCallback): void
  flush(callback?: (error?: Error) => void): void
  close(callback?: (error?: Error) => void): void
  childClient(options: { prefix?: string; suffix?: string; globalTags?: StatsdTags; errorHandler?: (error: Error) => void }): StatsdClient
  readonly host?: string
  readonly port?: number
  /** The tags added to every metric (globalTags, or global_tags). */
  readonly globalTags?: StatsdTags
}

/** hot-shots' constructor options that createStatsd() checks and passes through, and its own. */
export interface StatsdOptions {
  host?: string
  port?: number
  prefix?: string
  suffix?: string
  tagPrefix?: string
  tagSeparator?: string
  globalize?: boolean
  mock?: boolean
  globalTags?: StatsdTags
  /** hot-shots' older name for globalTags; pass one of the two. */
  global_tags?: StatsdTags
  includeDataDogTags?: boolean
  telegraf?: boolean
  protocol?: 'udp' | 'tcp' | 'uds' | 'stream'
  path?: string
  stream?: NodeJS.WritableStream
  udsRetryOptions?: Record<string, unknown>
  tcpGracefulErrorHandling?: boolean
  tcpGracefulRestartRateLimit?: number
  udsGracefulErrorHandling?: boolean
  udsGracefulRestartRateLimit?: number
  closingFlushInterval?: number
  includeDatadogTelemetry?: boolean
  telemetryFlushInterval?: number
  datadog?: boolean
  originDetection?: boolean
  containerID?: string
  cardinality?: 'none' | 'low' | 'orchestrator' | 'high'
  aggregation?: boolean | Record<string, unknown>
  useDefaultRoute?: boolean
  sampleRate?: number
  /** ms between buffer flushes. Default 1000. */
  bufferFlushInterval?: number
  cacheDns?: false
  /** Bytes per packet, at least 1; null: 1432 for UDP, 8192 otherwise. */
  maxBufferSize?: number | null
  udpSocketOptions?: Omit<SocketOptions, 'lookup'> | null
  errorHandler?: ((error: Error) => void) | null
  dnsCache?: { lookup: typeof import('node:dns').lookup } | DnsCache | null
  flushOnExit?: boolean
  /** Close (flushing) on SIGTERM and SIGINT, then let the signal act. Default true. */
  flushOnSignals?: boolean
  closeTimeoutMs?: number
  /** Bounds the close on a signal. Default 10000. */
  shutdownTimeoutMs?: number
  hotShotsOptions?: Record<string, unknown> | null
}

export interface StatsdStats {
  /** Packets the transport sent. */
  packets: number
  /** Bytes of those packets. */
  bytes: number
  /** Packets the transport failed to send (not in packets or bytes). */
  droppedPackets: number
  /** Every error the client met... */
  errors: number
  /** ...and by code. */
  errorsByCode: Record<string, number>
  /** Times the errorHandler threw. */
  handlerErrors: number
  /** Host lookups asked of the TTL cache. */
  lookups: number
  /** Of those, the ones that failed. */
  lookupErrors: number
  /** Failed lookups answered with the last good address. */
  lastKnownAddressUses: number
  /** close() calls that reached their deadline. */
  closeTimeouts: number
  /** Metrics sent after close() (increment() and the like, its child clients' too): dropped, counted here. */
  droppedAfterClose: number
}

export type IoHygieneStatsd<T extends object = StatsdClient> = Omit<T, 'close'> & {
  /** The callback gets the first error met while closing, as with hot-shots. */
  close(callback?: (error?: Error) => void): Promise<void>
  stats(): StatsdStats
}

export declare function createStatsd<T extends object = StatsdClient>(options?: StatsdOptions): IoHygieneStatsd<T>
export declare function wrapStatsd<T extends { increment(...args: any[]): unknown; flush(...args: any[]): unknown; close(...args: any[]): unknown }>(client: T, options?: { flushOnExit?: boolean; flushOnSignals?: boolean; closeTimeoutMs?: number; shutdownTimeoutMs?: number }): IoHygieneStatsd<T>

// http: the global dispatcher

export interface HttpOptions {
  /** Connections per origin (undici's Pool `connections`). Default 128. */
  connections?: number
  /** Idle keep-alive sockets close after this, unless the server hints less. Default 4000. */
  keepAliveTimeoutMs?: number
  /** TCP (and TLS) connect, DNS lookup included. Default 10000. */
  connectTimeoutMs?: number
  /** From the request written to the response headers; also the longest wait for a connection. Default 30000. */
  headersTimeoutMs?: number
  /** The longest silence between two body chunks. Default 30000. */
  bodyTimeoutMs?: number
  /** A total deadline for requests without a signal of their own; null: none (the default). */
  requestTimeoutMs?: number | null
  /** Retry idempotent requests answered 429, 502, 503 or 504: the server sees them again. Default false. */
  statusRetries?: boolean
  /** Retries per request, all reasons together. Default 2. */
  maxRetries?: number
  /** First backoff ceiling (full jitter, doubling). Default 100. */
  retryBaseDelayMs?: number
  /** The longest backoff or Retry-After waited for. Default 10000. */
  maxRetryDelayMs?: number
  /** Retries may be this % of an origin's requests over 10 s... Default 10. */
  retryBudgetPercent?: number
  /** ...plus this many a second. Default 10. */
  retryBudgetMinPerSecond?: number
  /** Stream and iterable bodies of a known length up to this are copied as they are sent, so that a retry can send them again. Default 65536. */
  maxReplayBodyBytes?: number
  /** Learn each origin's idle close and retire idle sockets before it. Default true. */
  learnIdleClose?: boolean
}

export interface HttpStats {
  requests: number
  retries: { staleSocket: number; connect: number; status: number }
  /** `queue` is null when `composed`: the application's dispatcher has its own pools. */
  timeouts: { connect: number; headers: number; body: number; queue: number | null; deadline: number }
  /** null when `composed`: the application's dispatcher's sockets are not io-hygiene's to count. */
  connectionsOpened: number | null
  budgetRefusals: number
  /** null when `composed`. */
  idleClosesLearned: number | null
  /** null when `composed`. */
  socketsRetired: number | null
  /** Whether io-hygiene's retries are composed onto the application's own dispatcher (a ProxyAgent, an mTLS Agent) set before install(), instead of io-hygiene's own Agent. */
  composed: boolean
  /** Whether io-hygiene's dispatcher is undici's global one (or will be made at first use); false after an IO_HYGIENE_HTTP_NOT_GLOBAL warning. */
  global: boolean
}

export interface HttpDispatcherHandle {
  /** The global dispatcher install() set: an undici Agent with io-hygiene's interceptor, or the application's own dispatcher with it composed on; null when another dispatcher took undici's global slot first. */
  readonly dispatcher: import('undici').Dispatcher | null
  stats(): HttpStats
}

// http sink

export interface HttpSinkOptions {
  /** The http: or https: endpoint (required). */
  url: string | URL
  name?: string
  method?: 'POST' | 'PUT'
  /** One record per line, or one JSON array. Default 'ndjson'. */
  format?: 'ndjson' | 'json'
  compression?: 'none' | 'gzip'
  /** Sent with every request (authentication); framing headers are refused. */
  headers?: Record<string, string> | null
  /** 0: a push while nothing is in flight goes at once. Default 0. */
  lingerMs?: number
  maxBatchItems?: number
  /** Of the uncompressed body. Default 5000000. */
  maxBatchBytes?: number
  maxQueuedItems?: number
  maxQueuedBytes?: number
  overflow?: 'wait' | 'reject'
  maxQueueWaitMs?: number
  maxWaitingItems?: number
  maxWaitingBytes?: number
  requestTimeoutMs?: number
  /** From push() to the 2xx, retries included. Default 120000. */
  deliveryTimeoutMs?: number
  retryBackoffMs?: number
  maxRetryBackoffMs?: number
  flushOnSignals?: boolean
  shutdownTimeoutMs?: number
}

export interface HttpSinkStats {
  queued: number
  queuedBytes: number
  waiting: number
  inFlight: number
  pushed: number
  delivered: number
  /** Refused at the call included. */
  rejected: number
  requests: number
  /** Failed requests to be tried again. */
  retries: number
  /** 413 halvings. */
  splits: number
  bytesSent: number
}

/** What a non-retriable HTTP answer rejects records with. */
export interface HttpStatusError extends IoHygieneError {
  code: 'ERR_IO_HYGIENE_HTTP_STATUS'
  status: number
  /** The first 512 characters of the response body. */
  body: string
}

export interface HttpSink {
  readonly closed: boolean
  /** Resolves when the request carrying the record got a 2xx. */
  push(record: unknown): Promise<void>
  flush(options?: { timeoutMs?: number | null }): Promise<void>
  close(options?: { timeoutMs?: number | null }): Promise<void>
  stats(): HttpSinkStats
}

export declare function createHttpSink(options: HttpSinkOptions): HttpSink

// kafka

export interface WrapProducerOptions {
  lingerMs?: number
  maxBatchItems?: number
  /** Records of one request; a larger message is refused. Default 1048527: one record batch of a default broker. */
  maxBatchBytes?: number
  maxQueuedItems?: number
  maxQueuedBytes?: number
  overflow?: 'wait' | 'reject'
  maxQueueWaitMs?: number
  maxWaitingItems?: number
  maxWaitingBytes?: number
  deliveryTimeoutMs?: number
  retryBackoffMs?: number
  maxRetryBackoffMs?: number
  /** Drain (send, await acknowledgements, disconnect) on SIGTERM and SIGINT, then let the signal act. Default true. */
  flushOnSignals?: boolean
  /** Bounds that drain. Default 10000. */
  shutdownTimeoutMs?: number
}

export interface KafkaProducerLike {
  connect(): Promise<void>
  disconnect(): Promise<void>
  sendBatch(batch: any): Promise<any[]>
  send?(record: any): Promise<any[]>
  on(event: string, listener: (e: any) => void): () => void
  transaction(): Promise<any>
  isIdempotent?(): boolean
  logger(): any
  events: Record<string, string>
}

export interface RecordMetadata {
  topicName: string
  partition: number
  errorCode: number
  baseOffset?: string
  logAppendTime?: string
  logStartOffset?: string
}

/** A message as kafkajs takes it (kafkajs's Message). */
export interface KafkaMessage {
  key?: Buffer | string | null
  value: Buffer | string | null
  partition?: number
  headers?: { [key: string]: Buffer | string | Array<Buffer | string> | undefined }
  timestamp?: string
}

/** Whether kafkajs runs with io-hygiene's corrected producer retry and grouping, or why not. */
export type KafkajsPatchStatus = 'patched' | 'off' | 'not-installed' | 'not-found' | 'loaded-too-early' | 'unknown-version'

export interface KafkaProducerStats extends BatcherStats {
  readonly kafkajsPatch: KafkajsPatchStatus
  /** false when the producer comes from a kafkajs io-hygiene has not corrected: each call is then sent in a request of its own. */
  readonly batching: boolean
}

/**
 * Whether a rejected send()'s messages may be in the topic: false when none of them reached a
 * broker (resending is safe), true when some of them are known written (the others failed),
 * 'unknown' when some may have been.
 */
export type KafkaWritten = false | true | 'unknown'

/** Every rejection of a wrapped producer's send() or sendBatch(). */
export interface KafkaSendError extends Error {
  code: string
  written: KafkaWritten
  cause?: unknown
}

export interface WrappedProducer<P extends KafkaProducerLike = KafkaProducerLike> {
  connect(): Promise<void>
  disconnect(options?: { timeoutMs?: number | null }): Promise<void>
  send(record: { topic: string; messages: KafkaMessage[]; acks?: -1 | 0 | 1; timeout?: number; compression?: number }): Promise<RecordMetadata[]>
  sendBatch(batch: { topicMessages: Array<{ topic: string; messages: KafkaMessage[] }>; acks?: -1 | 0 | 1; timeout?: number; compression?: number }): Promise<RecordMetadata[]>
  flush(options?: { timeoutMs?: number | null }): Promise<void>
  stats(): KafkaProducerStats
  on: P['on']
  events: P['events']
  transaction: P['transaction']
  logger: P['logger']
  isIdempotent(): boolean
}

/** What wrapProducer() needs of an @platformatic/kafka producer (its Producer, structurally). */
export interface PlatformaticProducerLike {
  send(options: any, callback?: any): any
  asStream(options?: any): any
  initIdempotentProducer(options: any, callback?: any): any
  getSendTopicPartitions(options: any): Map<string, Set<number>>
  beginTransaction(options?: any, callback?: any): any
  metadata(options: any, callback?: any): any
  close(force?: any, callback?: any): any
  on(event: string | symbol, listener: (...args: any[]) => void): unknown
  once(event: string | symbol, listener: (...args: any[]) => void): unknown
  off(event: string | symbol, listener: (...args: any[]) => void): unknown
}

/** @platformatic/kafka's ProduceResult for the call's own messages. */
export interface PlatformaticProduceResult {
  /** One per partition of the call's messages: the offset of its first message there. */
  offsets?: Array<{ topic: string; partition: number; offset: bigint }>
  /** At acks 0. */
  unwritableNodes?: number[]
}

/** A message as @platformatic/kafka's send() takes it; key and value go through its serializers. */
export interface PlatformaticMessage {
  topic: string
  key?: unknown
  value: unknown
  partition?: number
  headers?: Map<unknown, unknown> | Record<string, unknown>
  timestamp?: bigint
  metadata?: unknown
}

export interface PlatformaticSendOptions {
  messages: PlatformaticMessage[]
  acks?: number
  compression?: string
  idempotent?: boolean
  autocreateTopics?: boolean
  repeatOnStaleMetadata?: boolean
  producerId?: bigint
  producerEpoch?: number
  partitioner?: (message: any, key: Buffer | undefined, context: any) => number
}

export interface WrappedPlatformaticProducer<P extends PlatformaticProducerLike = PlatformaticProducerLike> {
  send(options: PlatformaticSendOptions): Promise<PlatformaticProduceResult>
  send(options: PlatformaticSendOptions, callback: (error: KafkaSendError | null, result?: PlatformaticProduceResult) => void): void
  flush(options?: { timeoutMs?: number | null }): Promise<void>
  /** Flushes, then closes the producer; `force` is @platformatic/kafka's own. */
  close(options?: boolean | { timeoutMs?: number | null; force?: boolean }): Promise<void>
  readonly closed: boolean
  stats(): BatcherStats
  beginTransaction: P['beginTransaction']
  asStream: P['asStream']
  metadata: P['metadata']
  on(event: string | symbol, listener: (...args: any[]) => void): this
  once(event: string | symbol, listener: (...args: any[]) => void): this
  off(event: string | symbol, listener: (...args: any[]) => void): this
}

export declare function wrapProducer<P extends PlatformaticProducerLike>(producer: P, options?: WrapProducerOptions): WrappedPlatformaticProducer<P>
export declare function wrapProducer<P extends KafkaProducerLike>(producer: P, options?: WrapProducerOptions): WrappedProducer<P>

// monitor

/** A condition string, `'<metric> <op> <number> [for <n> samples]'`, or its object form. */
export type MonitorCondition = string | {
  when: string
  name?: string
  /** Consecutive samples the condition must hold; overrides the string's `for`. */
  for?: number
  cooldownMs?: number
  /** Take a CPU profile when it fires (needs profileDir). Default true. */
  profile?: boolean
  /** Take a heap snapshot when it fires (needs heapSnapshotDir). Default false. */
  heapSnapshot?: boolean
}

/** The methods of an OpenTelemetry Meter the monitor uses (structural: @opentelemetry/api is optional). */
export interface OtelMeterLike {
  createHistogram(name: string, options?: any): any
  createObservableGauge(name: string, options?: any): any
  createObservableCounter(name: string, options?: any): any
  createObservableUpDownCounter(name: string, options?: any): any
  addBatchObservableCallback(callback: (result: any) => void, observables: any[]): void
  removeBatchObservableCallback(callback: (result: any) => void, observables: any[]): void
}

export interface MonitorOptions {
  /** Sampling interval (one unref'd timer). Default 1000. */
  intervalMs?: number
  /** monitorEventLoopDelay's resolution. Default 10. */
  delayResolutionMs?: number
  /** Default: GetAddrInfoReqWrap > 100, delayP99Ms > 100, elu > 0.9, each for 3 samples. */
  conditions?: readonly MonitorCondition[]
  /** Least time between two firings of one condition. Default 300000. */
  cooldownMs?: number
  /** Gets one warn(line) per firing. Default null. */
  logger?: { warn(message: string): unknown } | null
  /** Without a logger, an alert is a process warning (IO_HYGIENE_MONITOR_ALERT). Default true. */
  warnOnAlert?: boolean
  /** A createStatsd() client: gauges and window histograms each sample. Default null. */
  statsd?: { gauge(name: string, value: number, tags?: Record<string, string>): unknown; increment(name: string, value?: number, tags?: Record<string, string>): unknown } | null
  /** Prefix of the StatsD names. Default 'nodejs.'. */
  statsdPrefix?: string
  /** A prom-client Registry to register io_hygiene_* metrics into. Default null. */
  registry?: { registerMetric(metric: any): void; getSingleMetric(name: string): any; removeSingleMetric(name: string): void } | null
  /** true: publish to the global OpenTelemetry meter provider (needs @opentelemetry/api). Default false. */
  otel?: boolean
  /** An OpenTelemetry MeterProvider (from @opentelemetry/sdk-metrics) to publish through. Default null. */
  meterProvider?: { getMeter(name: string, version?: string): OtelMeterLike } | null
  /** Or an OpenTelemetry Meter of your own. Default null. */
  meter?: OtelMeterLike | null
  /** false: the operation histograms are not recorded through the meter (use createOtelProducer()). Default true. */
  otelHistograms?: boolean
  /** An OpenTelemetry LoggerProvider: each alert is also emitted as a log record. Default null. */
  loggerProvider?: { getLogger(name: string, version?: string): { emit(record: any): void } } | null
  /** Where CPU profiles go; null: none are taken. Default null. */
  profileDir?: string | null
  /** Length of a CPU profile. Default 2000. */
  profileDurationMs?: number
  /** Where heap snapshots go; null: none are taken. Default null. */
  heapSnapshotDir?: string | null
  /** No heap snapshot when more heap than this is in use. Default 268435456. */
  heapSnapshotMaxBytes?: number
  /** Files of io-hygiene's kept in profileDir or heapSnapshotDir, at most. Default 10. */
  maxFilesPerDir?: number
  /** Bytes of them, at most. Default 1073741824. */
  maxBytesPerDir?: number
}

export interface MonitorSample {
  timestamp: number
  requests: number
  handles: number
  requestsByType: Record<string, number>
  handlesByType: Record<string, number>
  delayP50Ms: number
  delayP99Ms: number
  delayMaxMs: number
  elu: number
  heapUsedBytes: number
  heapTotalBytes: number
  rssBytes: number
  gcCount: number
  gcPauseMs: number
  /** Every operation histogram that recorded something, since the process started. */
  histograms: Array<{ kind: string, labels: Record<string, string>, count: number, sumMs: number, maxMs: number, buckets: Record<string, number> }>
  /** Main-thread time this sample took. */
  costUs: number
}

/** What io-hygiene:monitor:alert carries. */
export interface MonitorAlert {
  name: string
  metric: string
  value: number
  op: '>' | '>=' | '<' | '<='
  threshold: number
  samples: number
  /** What io-hygiene can fix, when the metric is a request type it removes. */
  fix: string | null
  timestamp: number
  sample: MonitorSample
  profile: string | null
  heapSnapshot: string | null
}

export interface MonitorStats {
  samples: number
  alerts: number
  profiles: number
  profilesSkipped: number
  heapSnapshots: number
  heapSnapshotsSkipped: number
  errors: number
  /** The latest sample, null before the first. */
  sample: MonitorSample | null
}

export interface Monitor {
  /** Takes a sample now, evaluates the conditions on it and publishes it. */
  sample(): MonitorSample
  /** The latest sample and every operation histogram, as text. */
  report(): string
  stats(): MonitorStats
  /** Stops sampling; resolves once a CPU profile in flight is written. */
  close(): Promise<void>
}

export declare function createMonitor(options?: MonitorOptions): Monitor
/** The operation histograms as an OpenTelemetry MetricProducer, for a MetricReader's `metricProducers`. */
export declare function createOtelProducer(): { collect(options?: { timeoutMillis?: number }): Promise<any> }

export interface HistogramJSON { count: number; sumMs: number; maxMs: number; buckets: Record<string, number> }

/** Power-of-two (µs) latency histogram; values in ms. */
export declare class Histogram {
  readonly buckets: Float64Array
  readonly count: number
  readonly sumMs: number
  readonly maxMs: number
  record(ms: number): void
  /** record(0) for a path that reads no clock: a count in the lowest bucket. */
  recordZero(): void
  merge(other: Histogram | HistogramJSON): this
  since(earlier: Histogram): Histogram
  copy(): Histogram
  reset(): void
  percentile(p: number): number
  render(title?: string): string
  toJSON(): HistogramJSON
  static from(json: HistogramJSON): Histogram
}

/** The process's histogram for an operation kind and label set; keep it, then record(). */
export declare function histogram(kind: string, labels?: Record<string, string>): Histogram

/**
 * Closes every client that drains on signals (`flushOnSignals`: StatsD clients, wrapped Kafka
 * producers, HTTP sinks, batchers that opted in), all under one deadline (`timeoutMs`, default
 * 10000). `before` (your server's close) runs first; the clients close when it settles or at the
 * deadline. Never rejects: what could not be delivered in time is rejected to its own callers.
 */
export declare function closeAll(options?: { timeoutMs?: number; before?: (() => unknown) | null }): Promise<void>
