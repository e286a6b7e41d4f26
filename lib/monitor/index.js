'use strict'

const path = require('node:path')
const { performance } = require('node:perf_hooks')
const { channels } = require('../core/diagnostics')
const { integer, timerMs, string, boolean, nullable, resolve } = require('../core/options')
const { ERR_IO_HYGIENE_INVALID_OPTION, ERR_IO_HYGIENE_CLOSED, ERR_IO_HYGIENE_CONFLICTING_OPTIONS } = require('../core/errors')
const { Sampler } = require('./sampler')
const { parseCondition } = require('./conditions')
const { busy, startProfile, stopProfile, heapSnapshot, hasRoom } = require('./actions')
const { StatsdOutput } = require('./outputs/statsd')
const { register } = require('./outputs/prometheus')
const { histogram, series } = require('../metrics/registry')
const { Histogram } = require('../metrics/histogram')

// An object with these methods (duck-typed: pino, console, hot-shots,
// prom-client's Registry).
function hasMethods (expected, ...methods) {
  const check = (where, key, value) => {
    if (value === null || typeof value !== 'object' || methods.some((m) => typeof value[m] !== 'function')) {
      throw new ERR_IO_HYGIENE_INVALID_OPTION(where, key, expected, value)
    }
    return value
  }
  check.expects = 'object'
  return check
}

function conditionList () {
  const check = (where, key, value) => {
    if (!Array.isArray(value)) throw new ERR_IO_HYGIENE_INVALID_OPTION(where, key, 'an array of conditions', value)
    // Parsed here so that a bad one fails at the call; parsed again (cheaply)
    // against the final cooldownMs when the monitor is built.
    for (const condition of value) parseCondition(condition, { cooldownMs: 0 }, where)
    return Object.freeze([...value])
  }
  check.expects = 'string[]'
  return check
}

// Defaults, and why, are in docs/monitor.md's options table; a test keeps the two equal.
const spec = {
  intervalMs: { default: 1_000, check: timerMs(10) },
  delayResolutionMs: { default: 10, check: timerMs(1, 1_000) },
  conditions: {
    default: Object.freeze(['GetAddrInfoReqWrap > 100 for 3 samples', 'delayP99Ms > 100 for 3 samples', 'elu > 0.9 for 3 samples']),
    check: conditionList(),
  },
  cooldownMs: { default: 300_000, check: timerMs(0) },
  logger: { default: null, check: nullable(hasMethods('an object with a warn() method (console, pino)', 'warn')) },
  warnOnAlert: { default: true, check: boolean() },
  statsd: { default: null, check: nullable(hasMethods('a StatsD client with gauge() and increment() (createStatsd())', 'gauge', 'increment')) },
  statsdPrefix: { default: 'nodejs.', check: string() },
  registry: { default: null, check: nullable(hasMethods('a prom-client Registry', 'registerMetric', 'getSingleMetric', 'removeSingleMetric')) },
  otel: { default: false, check: boolean() },
  meterProvider: { default: null, check: nullable(hasMethods('an OpenTelemetry MeterProvider', 'getMeter')) },
  meter: {
    default: null,
    check: nullable(hasMethods('an OpenTelemetry Meter', 'createHistogram', 'createObservableGauge', 'createObservableCounter',
      'createObservableUpDownCounter', 'addBatchObservableCallback', 'removeBatchObservableCallback')),
  },
  otelHistograms: { default: true, check: boolean() },
  loggerProvider: { default: null, check: nullable(hasMethods('an OpenTelemetry LoggerProvider', 'getLogger')) },
  profileDir: { default: null, check: nullable(string()) },
  profileDurationMs: { default: 2_000, check: timerMs(1, 60_000) },
  heapSnapshotDir: { default: null, check: nullable(string()) },
  heapSnapshotMaxBytes: { default: 268_435_456, check: integer(0) },
  maxFilesPerDir: { default: 10, check: integer(0) },
  maxBytesPerDir: { default: 1_073_741_824, check: integer(0) },
}

const ALERT_WARNING = 'IO_HYGIENE_MONITOR_ALERT'

// Set by Monitor's static block: a second install() attaches outputs
// through it, and nothing else can.
let attachTo = null

// What IO_HYGIENE_DNS says to turn the module off (env.js reads booleans so).
const OFF = ['0', 'false']

// Request types io-hygiene removes, and what to turn on.
// `preloaded`: io-hygiene/register installed it before the application
// loaded, so no client can have captured dns.lookup before it.
function fixFor (type, preloaded) {
  if (type !== 'GetAddrInfoReqWrap') return null
  const dns = require('../dns').currentCache()
  if (!dns) {
    // The variable wins over code and over -r io-hygiene/register: advice to
    // install it would change nothing while the variable says 0.
    const variable = process.env.IO_HYGIENE_DNS
    if (OFF.includes(variable)) {
      return `io-hygiene's dns module is off: IO_HYGIENE_DNS=${variable} in the environment turned it off; without it, ` +
        'install() (or node -r io-hygiene/register) answers dns.lookup from a TTL cache, one getaddrinfo per name per TTL'
    }
    return 'io-hygiene\'s dns module is off: install({ dns: true }) (or node -r io-hygiene/register) answers dns.lookup ' +
      'from a TTL cache, one getaddrinfo per name per TTL'
  }
  if (preloaded) {
    return 'io-hygiene\'s dns module is on, loaded before the application, yet lookups reach getaddrinfo: names whose ' +
      'answers are not cached (errors, TTL 0), or a client that calls getaddrinfo without dns.lookup'
  }
  return 'io-hygiene\'s dns module is on, yet lookups reach getaddrinfo: a client that captured dns.lookup before ' +
    'install() (load with node -r io-hygiene/register), or names whose answers are not cached (errors, TTL 0)'
}

// A duration as a person reads it: three significant digits, whole
// milliseconds from 100 up (a percentile interpolated in a power-of-two
// bucket has no more precision than that).
function figure (ms) {
  return ms >= 100 ? String(Math.round(ms)) : String(Number(ms.toPrecision(3)))
}

function dominant (byType) {
  let best = null
  let most = 0
  for (const [type, n] of Object.entries(byType)) {
    if (n > most) {
      best = type
      most = n
    }
  }
  return best
}

class Monitor {
  #o
  #sampler
  #timer
  #due
  #conditions
  #last = null
  #statsd = null
  #prom = null
  #otel = null
  #otelAlert = null
  #closed = false
  #preloaded
  #stats = { samples: 0, alerts: 0, profiles: 0, profilesSkipped: 0, heapSnapshots: 0, heapSnapshotsSkipped: 0, errors: 0 }
  #totals = { gcCount: 0, gcPauseMs: 0, costUs: 0 }
  #pending = new Set()
  #full = new Set() // directories at their caps, said once

  constructor (o, how = { preloaded: false }) {
    this.#o = o
    this.#preloaded = how.preloaded
    this.#conditions = o.conditions.map((c) => ({ ...parseCondition(c, o), streak: 0, firedAt: -Infinity, fired: 0 }))
    // The outputs first, each of which may refuse what it was given (a
    // registry already holding our metrics, a provider whose getMeter()
    // throws); the sampler and its timer start only once all are in place.
    this.#outputs(o)
    this.#sampler = new Sampler({ resolutionMs: o.delayResolutionMs })
    this.#due = performance.now() + o.intervalMs
    this.#timer = setInterval(() => this.#tick(), o.intervalMs)
    this.#timer.unref()
  }

  // Attaches the outputs `o` names, all or none.
  #outputs (o) {
    const prom = o.registry !== null ? register(o.registry, () => this.#latest(), () => this.#totals) : null
    let otel = null
    let otelAlert = null
    try {
      // Loaded only when asked for: so is @opentelemetry/api, and only by `otel`.
      if (o.otel || o.meter !== null || o.meterProvider !== null) {
        otel = require('./outputs/otel').createOtelOutput(o, () => this.#last, () => this.#totals)
      }
      if (o.loggerProvider !== null) otelAlert = require('./outputs/otel').alertLogger(o.loggerProvider)
    } catch (error) {
      otel?.undo()
      prom?.undo()
      throw error
    }
    if (prom !== null) this.#prom = prom
    if (otel !== null) this.#otel = otel
    if (otelAlert !== null) this.#otelAlert = otelAlert
    if (o.statsd !== null) this.#statsd = new StatsdOutput(o.statsd, o.statsdPrefix)
  }

  // What a second install({ monitor }) gives that this monitor lacks: the
  // outputs (and a logger) no IO_HYGIENE_* variable can carry. Returns the
  // options now in use; the rest stays as it was, and install() says so.
  static {
    attachTo = (monitor, asked) => monitor.#attach(asked)
  }

  #attach (asked) {
    const o = this.#o
    if (this.#closed) return o
    const take = {}
    for (const key of ['logger', 'statsd', 'registry', 'loggerProvider']) {
      if (o[key] === null && asked[key] !== null) take[key] = asked[key]
    }
    if (take.statsd !== undefined) take.statsdPrefix = asked.statsdPrefix
    // One place for the metrics: only a monitor without one takes another.
    if (!o.otel && o.meter === null && o.meterProvider === null) {
      for (const key of ['meter', 'meterProvider']) if (asked[key] !== null) take[key] = asked[key]
      if (asked.otel) take.otel = true
      // What goes through the meter comes with it (otelHistograms: false when
      // the reader takes the histograms from createOtelProducer()).
      if (take.meter !== undefined || take.meterProvider !== undefined || take.otel) take.otelHistograms = asked.otelHistograms
    }
    if (Object.keys(take).length === 0) return o
    const added = {
      registry: null,
      otel: false,
      meter: null,
      meterProvider: null,
      loggerProvider: null,
      statsd: null,
      ...take,
      otelHistograms: take.otelHistograms ?? o.otelHistograms,
      statsdPrefix: take.statsdPrefix ?? o.statsdPrefix,
    }
    this.#outputs(added)
    this.#o = Object.freeze({ ...o, ...take })
    return this.#o
  }

  #tick () {
    const now = performance.now()
    const lateMs = Math.max(0, now - this.#due)
    this.#due = now + this.#o.intervalMs
    this.#take(lateMs)
  }

  #latest () {
    return this.#last ?? this.#take(0)
  }

  #take (lateMs) {
    const sample = this.#sampler.take(lateMs)
    this.#last = sample
    this.#stats.samples++
    this.#totals.gcCount += sample.gcCount
    this.#totals.gcPauseMs += sample.gcPauseMs
    this.#totals.costUs += sample.costUs
    if (channels.monitorSample.hasSubscribers) channels.monitorSample.publish(sample)
    this.#evaluate(sample)
    if (this.#statsd !== null) this.#guard(() => this.#statsd.publish(sample))
    if (this.#prom !== null) this.#guard(() => this.#prom.sync())
    if (this.#otel !== null) this.#guard(() => this.#otel.sync())
    return sample
  }

  // Outputs and actions run on the monitor's timer: an error in one (a
  // logger, a StatsD client that throws) is counted, never thrown.
  #guard (fn) {
    try {
      fn()
    } catch (error) {
      this.#error(error)
    }
  }

  // A condition that stays true writes a file per cooldown, forever: the
  // directory's caps stop it, said once per directory to the logger.
  #hasRoom (dir) {
    const o = this.#o
    if (hasRoom(dir, o.maxFilesPerDir, o.maxBytesPerDir)) return true
    if (!this.#full.has(dir)) {
      this.#full.add(dir)
      this.#tell(`io-hygiene monitor: ${dir} holds maxFilesPerDir (${o.maxFilesPerDir}) files or maxBytesPerDir ` +
        `(${o.maxBytesPerDir}) bytes of io-hygiene's profiles and snapshots: no more are written there until some are removed`)
    }
    return false
  }

  #error (error) {
    this.#stats.errors++
    try {
      this.#o.logger?.warn(`io-hygiene monitor: ${error.message}`)
    } catch {
      // The logger is what failed: the count above is all that is left.
    }
  }

  #evaluate (sample) {
    const now = sample.timestamp
    for (const c of this.#conditions) {
      c.streak = c.holds(sample) ? c.streak + 1 : 0
      if (c.streak < c.for || now - c.firedAt < c.cooldownMs) continue
      c.firedAt = now
      c.fired++
      // Guarded one by one: an action that throws (a full disk for a heap
      // snapshot) must not silence the conditions after it.
      this.#guard(() => this.#fire(c, sample))
    }
  }

  #fire (c, sample) {
    const o = this.#o
    this.#stats.alerts++
    const value = c.read(sample)
    const type = c.metric === 'requests' ? dominant(sample.requestsByType) : c.metric
    const stamp = `${new Date(sample.timestamp).toISOString().replace(/[:.]/g, '-')}-${process.pid}`
    const slug = c.name.replace(/[^A-Za-z0-9]+/g, '-').replace(/^-|-$/g, '')
    const alert = {
      name: c.name,
      metric: c.metric,
      value,
      op: c.op,
      threshold: c.threshold,
      samples: c.for,
      fix: fixFor(type, this.#preloaded),
      timestamp: sample.timestamp,
      sample,
      profile: null,
      heapSnapshot: null,
    }
    if (o.profileDir !== null && c.profile) {
      if (busy() || !this.#hasRoom(o.profileDir)) {
        this.#stats.profilesSkipped++
      } else {
        alert.profile = path.resolve(o.profileDir, `io-hygiene-${slug}-${stamp}.cpuprofile`)
        this.#stats.profiles++
        const written = startProfile(this, alert.profile, o.profileDurationMs, (error) => this.#error(error))
        this.#pending.add(written)
        written.then(() => this.#pending.delete(written))
      }
    }
    if (o.heapSnapshotDir !== null && c.heapSnapshot) {
      const file = path.resolve(o.heapSnapshotDir, `io-hygiene-${slug}-${stamp}.heapsnapshot`)
      alert.heapSnapshot = this.#hasRoom(o.heapSnapshotDir) ? heapSnapshot(file, sample.heapUsedBytes, o.heapSnapshotMaxBytes) : null
      if (alert.heapSnapshot === null) this.#stats.heapSnapshotsSkipped++
      else this.#stats.heapSnapshots++
    }
    if (channels.monitorAlert.hasSubscribers) channels.monitorAlert.publish(alert)
    if (this.#otelAlert !== null) this.#guard(() => this.#otelAlert(alert))
    this.#tell(`io-hygiene monitor: ${c.name} (${c.metric} ${value} ${c.op} ${c.threshold}` +
      `${c.for > 1 ? ` for ${c.for} samples` : ''})` +
      `${alert.fix ? `; ${alert.fix}` : ''}` +
      `${alert.profile ? `; CPU profile: ${alert.profile}` : ''}` +
      `${alert.heapSnapshot ? `; heap snapshot: ${alert.heapSnapshot}` : ''}`)
  }

  // Without a logger (IO_HYGIENE_MONITOR=1 can set none), what the monitor
  // has to say is a process warning: on stderr by default, and silenced or
  // redirected as any warning is (--disable-warning, --redirect-warnings).
  #tell (line) {
    const o = this.#o
    if (o.logger !== null) o.logger.warn(line)
    else if (o.warnOnAlert) process.emitWarning(line, { code: ALERT_WARNING, type: 'IoHygieneWarning' })
  }

  // Takes a sample now (the window since the previous one ends), evaluates
  // the conditions on it and publishes it, as the timer does.
  sample () {
    if (this.#closed) throw new ERR_IO_HYGIENE_CLOSED('monitor')
    return this.#take(0)
  }

  // The latest sample and every operation histogram, as a person reads them.
  report () {
    const s = this.#latest()
    const list = (byType) => Object.entries(byType).sort((a, b) => b[1] - a[1]).map(([t, n]) => `, ${t} ${n}`).join('')
    const mib = (bytes) => `${(bytes / 1048576).toFixed(1)} MiB`
    const lines = [
      `io-hygiene monitor at ${new Date(s.timestamp).toISOString()} (every ${this.#o.intervalMs} ms; this sample took ${s.costUs} µs)`,
      `active requests ${s.requests}${list(s.requestsByType)}`,
      `active handles ${s.handles}${list(s.handlesByType)}`,
      `event-loop delay p50 ${s.delayP50Ms} ms, p99 ${s.delayP99Ms} ms, max ${s.delayMaxMs} ms; utilisation ${s.elu}`,
      `heap ${mib(s.heapUsedBytes)} used of ${mib(s.heapTotalBytes)}; rss ${mib(s.rssBytes)}; GC ${s.gcCount} runs, ${s.gcPauseMs} ms`,
    ]
    for (const c of this.#conditions) {
      lines.push(`condition ${c.name}: ${c.fired ? `fired ${c.fired} times` : 'quiet'}${c.streak ? `, holding for ${c.streak} samples` : ''}`)
    }
    for (const { kind, labels, histogram: h } of series()) {
      if (h.count === 0) continue
      const tags = Object.entries(labels).map(([k, v]) => `${k}=${v}`).join(' ')
      lines.push('', h.render(`${kind}${tags ? ` ${tags}` : ''}: ${h.count} recorded, p50 ${figure(h.percentile(50))} ms, p99 ${figure(h.percentile(99))} ms`))
    }
    return lines.join('\n')
  }

  // Counters, and the latest sample (null before the first).
  stats () {
    return { ...this.#stats, sample: this.#last }
  }

  // Stops sampling and unregisters from the prom-client registry; resolves
  // once a CPU profile in flight is written (it is stopped early).
  close () {
    if (!this.#closed) {
      this.#closed = true
      clearInterval(this.#timer)
      this.#sampler.close()
      this.#prom?.undo()
      this.#otel?.undo()
      stopProfile(this)
    }
    return Promise.all(this.#pending).then(() => {})
  }
}

function createMonitor (options) {
  const o = resolve('createMonitor()', spec, options)
  check(o, 'createMonitor()')
  return new Monitor(o)
}

// One place for the instruments: a meter, a provider, or the global provider.
function check (o, where) {
  const given = ['otel', 'meterProvider', 'meter'].filter((key) => (key === 'otel' ? o.otel : o[key] !== null))
  if (given.length > 1) throw new ERR_IO_HYGIENE_CONFLICTING_OPTIONS(where, `options ${given.map((k) => `"${k}"`).join(' and ')} each say where the metrics go: give one`)
}

// install({ monitor }): one monitor for the process; undo closes it.
function installMonitor (resolved, how) {
  const monitor = new Monitor(resolved, how)
  return { value: monitor, undo: () => { monitor.close() } }
}

function attachOutputs (monitor, asked) {
  return attachTo(monitor, asked)
}

module.exports = { createMonitor, installMonitor, attachOutputs, check, spec, histogram, Histogram, Monitor, ALERT_WARNING }
