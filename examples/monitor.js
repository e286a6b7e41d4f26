'use strict'

// `node examples/monitor.js`: a flood of uncached dns.lookup calls (what a
// StatsD client that resolves its host for every metric does) as the
// monitor sees it, first with io-hygiene's dns module off, then on.
//
// With it off, every lookup is a getaddrinfo call on libuv's thread pool:
// GetAddrInfoReqWrap piles up in the active requests, the condition holds
// for 3 samples, and the alert names the fix. With it on, the cache answers,
// and the same flood leaves no request in flight. Each lookup's latency,
// queueing included, goes into a histogram, shown as a quantize chart.
const dc = require('node:diagnostics_channel')
const dns = require('node:dns')
const { performance } = require('node:perf_hooks')
const { createMonitor, histogram, install, uninstall } = require('io-hygiene')

const HOST = 'localhost' // answered from /etc/hosts: no network needed

// Issues `burst` lookups per turn of the event loop for `durationMs`, and
// resolves when every one has answered, with the time from the start to the
// first alert (null if none came).
function flood ({ durationMs = 1_500, burst = 200, label }) {
  const latency = histogram('example.lookup', { dns: label })
  const start = performance.now()
  let detectMs = null
  const onAlert = () => { detectMs ??= performance.now() - start }
  dc.subscribe('io-hygiene:monitor:alert', onAlert)
  let issued = 0
  let answered = 0
  return new Promise((resolve) => {
    const done = () => {
      if (answered < issued || performance.now() - start < durationMs) return
      dc.unsubscribe('io-hygiene:monitor:alert', onAlert)
      resolve({ issued, detectMs, latency })
    }
    const turn = () => {
      if (performance.now() - start >= durationMs) return done()
      for (let i = 0; i < burst; i++) {
        const t0 = performance.now()
        issued++
        dns.lookup(HOST, () => {
          latency.record(performance.now() - t0)
          answered++
          done()
        })
      }
      setImmediate(turn)
    }
    turn()
  })
}

async function phase (label, monitorOptions) {
  console.log(`\n=== dns module ${label} ===`)
  const monitor = createMonitor({
    intervalMs: 250,
    conditions: ['GetAddrInfoReqWrap > 100 for 3 samples'],
    logger: { warn: (line) => console.log(`ALERT ${line}`) },
    ...monitorOptions,
  })
  const timer = setInterval(() => {
    const s = monitor.sample()
    console.log(`sample: GetAddrInfoReqWrap ${s.requestsByType.GetAddrInfoReqWrap ?? 0}, ` +
      `requests ${s.requests}, loop delay p99 ${s.delayP99Ms} ms, utilisation ${s.elu}, sample cost ${s.costUs} µs`)
  }, 250)
  const { issued, detectMs, latency } = await flood({ label })
  clearInterval(timer)
  await monitor.close()
  console.log(`${issued} lookups; ${detectMs === null ? 'no alert' : `alert after ${Math.round(detectMs)} ms`}`)
  console.log(latency.render(`lookup latency with the dns module ${label} (p50 ${latency.percentile(50)} ms, p99 ${latency.percentile(99)} ms):`))
}

async function main () {
  // The example samples from its own interval (to print each sample), so the
  // monitor's timer is left idle.
  const quiet = { intervalMs: 2 ** 31 - 1 }
  await phase('off', quiet)
  install({ dns: true })
  await phase('on', quiet)
  uninstall()
}

if (require.main === module) main()

module.exports = { flood }
