'use strict'

// A real StatsD receiver over UDP, for tests, examples and benchmarks. It
// parses the line protocol (StatsD, DogStatsD tags and extensions, Telegraf
// tags in the name) and counts packets, lines and bytes, and the largest
// packet it saw.
const { bindUdp } = require('./udp')

// One line: `name:value[:value...]|type[|@rate][|#tags][|Tts][|c:id]...`.
// Events (`_e{...}`) and service checks (`_sc|...`) are kept raw.
function parseLine (line) {
  if (line.startsWith('_e{') || line.startsWith('_sc|')) return { kind: line.startsWith('_e') ? 'event' : 'check', raw: line }
  const parts = line.split('|')
  const head = parts[0]
  const colon = head.indexOf(':')
  if (colon <= 0 || parts.length < 2) return { kind: 'invalid', raw: line }
  const metric = {
    kind: 'metric',
    name: head.slice(0, colon),
    value: head.slice(colon + 1),
    type: parts[1],
    sampleRate: 1,
    tags: [],
    raw: line,
  }
  for (let i = 2; i < parts.length; i++) {
    const part = parts[i]
    if (part.startsWith('@')) metric.sampleRate = Number(part.slice(1))
    else if (part.startsWith('#')) metric.tags = part.slice(1).split(',')
    else if (part.startsWith('T')) metric.timestamp = Number(part.slice(1))
    else (metric.extensions ??= []).push(part)
  }
  return metric
}

class StatsdReceiver {
  #socket = null
  #waiters = new Set()
  address = null
  port = 0
  packets = 0
  lines = 0
  bytes = 0
  maxPacketBytes = 0
  metrics = [] // parsed lines, when `keep` is on
  keep

  constructor ({ keep = true } = {}) {
    this.keep = keep
  }

  async listen (port = 0, address = '127.0.0.1') {
    // A large receive buffer: the sender shares this process's event loop
    // in tests, and bursts must not be lost while the loop is busy.
    this.#socket = await bindUdp({ port, address, recvBufferSize: 8 << 20, onMessage: (msg) => this.#onMessage(msg) })
    this.address = this.#socket.address().address
    this.port = this.#socket.address().port
    return this
  }

  #onMessage (msg) {
    this.packets++
    this.bytes += msg.length
    if (msg.length > this.maxPacketBytes) this.maxPacketBytes = msg.length
    const text = msg.toString('utf8')
    let start = 0
    for (;;) {
      const end = text.indexOf('\n', start)
      const line = end === -1 ? text.slice(start) : text.slice(start, end)
      if (line !== '') {
        this.lines++
        if (this.keep) this.metrics.push(parseLine(line))
      }
      if (end === -1) break
      start = end + 1
    }
    for (const waiter of this.#waiters) waiter()
  }

  // Resolves when `predicate(this)` is true, or with false after `ms`.
  waitFor (predicate, ms = 5000) {
    if (typeof predicate === 'number') {
      const lines = predicate
      predicate = (r) => r.lines >= lines
    }
    if (predicate(this)) return Promise.resolve(true)
    return new Promise((resolve) => {
      const done = (value) => {
        clearTimeout(timer)
        this.#waiters.delete(check)
        resolve(value)
      }
      const check = () => { if (predicate(this)) done(true) }
      const timer = setTimeout(done, ms, false)
      this.#waiters.add(check)
    })
  }

  // Resolves after no packet arrived for `quietMs` (or after `maxMs`).
  settle (quietMs = 100, maxMs = 10_000) {
    const deadline = Date.now() + maxMs
    return new Promise((resolve) => {
      let last = this.packets
      const tick = () => {
        if (this.packets === last || Date.now() > deadline) return resolve()
        last = this.packets
        setTimeout(tick, quietMs)
      }
      setTimeout(tick, quietMs)
    })
  }

  find (name) {
    return this.metrics.filter((m) => m.name === name)
  }

  reset () {
    this.packets = 0
    this.lines = 0
    this.bytes = 0
    this.maxPacketBytes = 0
    this.metrics = []
  }

  get server () {
    return `${this.address}:${this.port}`
  }

  close () {
    if (!this.#socket) return Promise.resolve()
    const socket = this.#socket
    this.#socket = null
    return new Promise((resolve) => socket.close(resolve))
  }
}

async function startStatsdReceiver (options = {}) {
  const receiver = new StatsdReceiver(options)
  return receiver.listen(options.port, options.address)
}

module.exports = { StatsdReceiver, startStatsdReceiver, parseLine }
