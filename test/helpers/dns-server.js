'use strict'

// A real authoritative DNS server over UDP, for tests and benchmarks. Each
// test sets its records (with TTLs), its failure mode and its delay, and reads
// how many queries arrived. Names it does not know get NXDOMAIN.
const { bindUdp } = require('./udp')
const packet = require('dns-packet')

class TestDnsServer {
  #socket = null
  #records = new Map() // name -> { A: [{ address, ttl }], AAAA: [...] }
  #pending = new Set()
  #held = null // replies waiting for release(), while hold() is on
  mode = 'answer' // 'answer' | 'refuse' | 'servfail' | 'blackhole' | 'nxdomain'
  delayMs = 0
  // With { ttl, minimum } (seconds): negative replies (NXDOMAIN, and no
  // records of the type asked) carry the zone's SOA, as real servers do, so
  // a caching resolver may keep them (RFC 2308); null sends none.
  soa = null
  dropAfter = Infinity // queries past this many (since resetCounts) get no reply
  queries = 0
  nxdomainAnswers = 0 // replies that said "no such name"
  queriesByName = new Map() // `${name} ${type}` -> count
  clients = new Set() // `${address}:${port}` of every sender: how many sockets asked
  address = null
  port = 0

  // Replace the records of `name`. `a` and `aaaa` are arrays of addresses;
  // `ttl` is in seconds, as on the wire.
  set (name, { a = [], aaaa = [], ttl = 60 } = {}) {
    this.#records.set(name.toLowerCase(), {
      A: a.map((address) => ({ address, ttl })),
      AAAA: aaaa.map((address) => ({ address, ttl })),
    })
    return this
  }

  delete (name) {
    this.#records.delete(name.toLowerCase())
    return this
  }

  count (name, type) {
    if (type) return this.queriesByName.get(`${name.toLowerCase()} ${type}`) ?? 0
    return (this.queriesByName.get(`${name.toLowerCase()} A`) ?? 0) +
      (this.queriesByName.get(`${name.toLowerCase()} AAAA`) ?? 0)
  }

  // Keep every reply from now on until release(): a resolution that stays in
  // flight for exactly as long as a test needs, with no timer to outrun.
  hold () {
    this.#held ??= []
  }

  release () {
    const held = this.#held ?? []
    this.#held = null
    for (const send of held) send()
  }

  resetCounts () {
    this.queries = 0
    this.nxdomainAnswers = 0
    this.queriesByName.clear()
    this.clients.clear()
  }

  async listen (port = 0, address = '127.0.0.1') {
    this.#socket = await bindUdp({ port, address, onMessage: (msg, rinfo) => this.#onMessage(msg, rinfo) })
    this.address = this.#socket.address().address
    this.port = this.#socket.address().port
    return this
  }

  // `host:port` for dns.Resolver#setServers.
  get server () {
    return `${this.address}:${this.port}`
  }

  close () {
    for (const timer of this.#pending) clearTimeout(timer)
    this.#pending.clear()
    if (!this.#socket) return Promise.resolve()
    const socket = this.#socket
    this.#socket = null
    return new Promise((resolve) => socket.close(resolve))
  }

  #onMessage (msg, rinfo) {
    let query
    try {
      query = packet.decode(msg)
    } catch {
      return
    }
    const question = query.questions[0]
    if (!question) return
    this.queries++
    this.clients.add(`${rinfo.address}:${rinfo.port}`)
    const key = `${question.name.toLowerCase()} ${question.type}`
    this.queriesByName.set(key, (this.queriesByName.get(key) ?? 0) + 1)
    if (this.mode === 'blackhole' || this.queries > this.dropAfter) return
    const reply = this.#answer(query, question)
    const send = () => {
      if (this.#socket) this.#socket.send(reply, rinfo.port, rinfo.address)
    }
    if (this.#held !== null) {
      this.#held.push(send)
    } else if (this.delayMs > 0) {
      const timer = setTimeout(() => {
        this.#pending.delete(timer)
        send()
      }, this.delayMs)
      this.#pending.add(timer)
    } else {
      send()
    }
  }

  #answer (query, question) {
    const response = {
      id: query.id,
      type: 'response',
      flags: packet.AUTHORITATIVE_ANSWER | (query.flags & packet.RECURSION_DESIRED) | packet.RECURSION_AVAILABLE,
      questions: [question],
      answers: [],
    }
    if (this.mode === 'refuse') return packet.encode({ ...response, flags: response.flags | 5 })
    if (this.mode === 'servfail') return packet.encode({ ...response, flags: response.flags | 2 })
    const record = this.#records.get(question.name.toLowerCase())
    const authorities = this.soa === null
      ? []
      : [{ name: 'test', type: 'SOA', class: 'IN', ttl: this.soa.ttl, data: { mname: 'ns.test', rname: 'hostmaster.test', serial: 1, refresh: 60, retry: 60, expire: 600, minimum: this.soa.minimum } }]
    if (!record || this.mode === 'nxdomain') {
      this.nxdomainAnswers++
      return packet.encode({ ...response, flags: response.flags | 3, authorities })
    }
    const rrs = record[question.type] ?? []
    response.answers = rrs.map(({ address, ttl }) => ({
      name: question.name, type: question.type, class: 'IN', ttl, data: address,
    }))
    if (rrs.length === 0) response.authorities = authorities
    return packet.encode(response)
  }
}

async function startDnsServer (options) {
  const server = new TestDnsServer()
  return server.listen(options?.port, options?.address)
}

module.exports = { TestDnsServer, startDnsServer }
