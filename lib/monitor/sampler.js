'use strict'

const { monitorEventLoopDelay, performance, PerformanceObserver } = require('node:perf_hooks')

// libuv requests as process.getActiveResourcesInfo() names them
// (GetAddrInfoReqWrap, FSReqCallback, FSReqPromise, WriteWrap,
// SimpleWriteWrap, ShutdownWrap, SendWrap, TCPConnectWrap...); every other
// name is a handle (sockets, servers, and ref'd timers as "Timeout" and
// "Immediate"). Unref'd handles are not listed, and c-ares queries
// (dns.resolve*, Resolver) are not libuv requests: neither is ever counted.
const REQUEST = /(ReqWrap|WriteWrap|ShutdownWrap|SendWrap|ConnectWrap)$|^FSReq/
function isRequest (name) {
  return REQUEST.test(name)
}

// One window of the process's health per take(): resources by type now, and
// since the previous take() the event-loop delay, its utilisation and GC.
class Sampler {
  #delay
  #resolutionNs
  #elu = performance.eventLoopUtilization()
  #observer
  #gcCount = 0
  #gcPauseMs = 0
  #kinds = new Map() // resource name -> true if a request

  constructor ({ resolutionMs }) {
    this.#resolutionNs = resolutionMs * 1e6
    this.#delay = monitorEventLoopDelay({ resolution: resolutionMs })
    this.#delay.enable()
    this.#observer = new PerformanceObserver((list) => {
      const entries = list.getEntries()
      this.#gcCount += entries.length
      for (let i = 0; i < entries.length; i++) this.#gcPauseMs += entries[i].duration
    })
    this.#observer.observe({ type: 'gc' })
  }

  // `lateMs`: how late the caller's own timer fired, which a loop blocked for
  // the whole window shows even when the delay histogram has not recorded it.
  take (lateMs = 0) {
    const cpu = process.cpuUsage()
    const start = performance.now()
    const requestsByType = {}
    const handlesByType = {}
    let requests = 0
    let handles = 0
    const kinds = this.#kinds
    for (const name of process.getActiveResourcesInfo()) {
      let request = kinds.get(name)
      if (request === undefined) {
        request = isRequest(name)
        kinds.set(name, request)
      }
      if (request) {
        requests++
        requestsByType[name] = (requestsByType[name] ?? 0) + 1
      } else {
        handles++
        handlesByType[name] = (handlesByType[name] ?? 0) + 1
      }
    }
    // monitorEventLoopDelay records the whole interval between its timer's
    // runs; the delay is what exceeds the resolution.
    const d = this.#delay
    const res = this.#resolutionNs
    const delayMs = (ns) => d.count === 0 ? 0 : Math.max(0, ns - res) / 1e6
    const delayP50Ms = delayMs(d.percentile(50))
    const delayP99Ms = delayMs(d.percentile(99))
    const delayMaxMs = Math.max(delayMs(d.max), lateMs)
    d.reset()
    const elu = performance.eventLoopUtilization()
    const utilization = performance.eventLoopUtilization(elu, this.#elu).utilization
    this.#elu = elu
    const memory = process.memoryUsage()
    const sample = {
      timestamp: Date.now(),
      requests,
      handles,
      requestsByType,
      handlesByType,
      delayP50Ms: round(Math.min(delayP50Ms, delayMaxMs)),
      delayP99Ms: round(Math.min(delayP99Ms, delayMaxMs)),
      delayMaxMs: round(delayMaxMs),
      elu: round(utilization, 4),
      heapUsedBytes: memory.heapUsed,
      heapTotalBytes: memory.heapTotal,
      rssBytes: memory.rss,
      gcCount: this.#gcCount,
      gcPauseMs: round(this.#gcPauseMs),
      costUs: 0,
      wallUs: 0,
    }
    this.#gcCount = 0
    this.#gcPauseMs = 0
    const used = process.cpuUsage(cpu)
    sample.costUs = used.user + used.system
    sample.wallUs = Math.round((performance.now() - start) * 1000)
    return sample
  }

  close () {
    this.#delay.disable()
    this.#observer.disconnect()
  }
}

function round (n, digits = 3) {
  const f = 10 ** digits
  return Math.round(n * f) / f
}

module.exports = { Sampler, isRequest }
