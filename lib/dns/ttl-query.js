'use strict'

const { isIP } = require('./ip')
const { domainToASCII } = require('node:url')

const TYPE_A = 1
const TYPE_AAAA = 28
const TYPE_CNAME = 5

// Asks DNS for the TTLs of a name's A and/or AAAA records, beside the
// getaddrinfo that gave the answer. The answer is already with its callers;
// the TTL only says how long to keep it, so waiting for one must never keep
// the process alive: the sockets and the timer are unref'd (a c-ares
// Resolver cannot be). As c-ares does, all queries share one socket per
// address family, open only while some query waits, so a burst of cold names
// costs no file descriptor per name; and one timer serves them all, as every
// try waits the same `timeoutMs` (deadlines come in the order tries start).
// Each try asks the next of the servers given (dns.getServers()'s form);
// `tries` tries in all.
class TtlQuery {
  #timeoutMs
  #tries
  #sockets = { udp4: null, udp6: null }
  #pending = new Map() // query id -> try in flight
  #head = null // tries in flight, earliest deadline first (a linked list)
  #tail = null
  #timer = null

  constructor ({ timeoutMs, tries }) {
    this.#timeoutMs = timeoutMs
    this.#tries = tries
  }

  // callback(records, rcode) once, with [{ address, ttl, family }] for what
  // answered, maybe nothing, and the last reply's rcode (-1: no reply).
  query (servers, hostname, want4, want6, callback) {
    const name = wireName(hostname)
    if (name === null || servers.length === 0 || (!want4 && !want6)) return process.nextTick(callback, [])
    const lookup = { servers, name, records: [], rcode: -1, left: (want4 ? 1 : 0) + (want6 ? 1 : 0), callback }
    if (want4) this.#send(lookup, TYPE_A, 0)
    if (want6) this.#send(lookup, TYPE_AAAA, 0)
    if (this.#timer === null) this.#arm()
  }

  #send (lookup, type, attempt) {
    const server = parseServer(lookup.servers[attempt % lookup.servers.length])
    let id
    do id = Math.floor(Math.random() * 65536); while (this.#pending.has(id))
    const entry = { id, lookup, type, attempt, server, deadline: performance.now() + this.#timeoutMs, next: null }
    this.#pending.set(id, entry)
    if (this.#tail === null) this.#head = entry
    else this.#tail.next = entry
    this.#tail = entry
    this.#socket(isIP(server.address) === 6 ? 'udp6' : 'udp4').send(encodeQuery(id, lookup.name, type), server.port, server.address)
  }

  #socket (kind) {
    let socket = this.#sockets[kind]
    if (socket === null) {
      socket = this.#sockets[kind] = require('node:dgram').createSocket(kind)
      socket.unref()
      // A send that fails (no route) is a try that gets no answer.
      socket.on('error', () => {})
      socket.on('message', (msg, rinfo) => this.#onMessage(msg, rinfo))
    }
    return socket
  }

  #onMessage (msg, rinfo) {
    if (msg.length < 2) return
    const entry = this.#pending.get(msg.readUInt16BE(0))
    if (entry === undefined || rinfo.address !== entry.server.address || rinfo.port !== entry.server.port) return
    const found = decodeReply(msg, entry.type)
    if (found === null) return
    // A truncated reply says nothing about the name.
    entry.lookup.rcode = (msg[2] & 0x02) !== 0 ? -1 : msg[3] & 0x0f
    for (const r of found) entry.lookup.records.push(r)
    this.#done(entry)
  }

  // The try `entry` is over (answered, or out of tries).
  #done (entry) {
    this.#pending.delete(entry.id)
    if (--entry.lookup.left === 0) entry.lookup.callback(entry.lookup.records, entry.lookup.rcode)
    if (this.#pending.size === 0) this.#idle()
  }

  // Nothing in flight: close the sockets and the timer until the next query.
  #idle () {
    for (const kind of ['udp4', 'udp6']) {
      this.#sockets[kind]?.close()
      this.#sockets[kind] = null
    }
    clearTimeout(this.#timer)
    this.#timer = null
    this.#head = this.#tail = null
  }

  #arm () {
    this.#timer = setTimeout(() => this.#fire(), Math.max(1, Math.ceil(this.#head.deadline - performance.now())))
    this.#timer.unref()
  }

  #fire () {
    this.#timer = null
    const now = performance.now()
    while (this.#head !== null && this.#head.deadline <= now) {
      const entry = this.#head
      this.#head = entry.next
      if (this.#head === null) this.#tail = null
      // Answered meanwhile: its id is gone, or taken by another try.
      if (this.#pending.get(entry.id) !== entry) continue
      if (entry.attempt + 1 < this.#tries) {
        this.#pending.delete(entry.id)
        this.#send(entry.lookup, entry.type, entry.attempt + 1)
      } else {
        this.#done(entry)
      }
    }
    if (this.#head !== null) this.#arm()
  }
}

// The name's labels as on the wire, or null for one DNS cannot carry.
function wireName (hostname) {
  // eslint-disable-next-line no-control-regex -- ASCII is what goes as-is
  const ascii = /^[\x00-\x7f]*$/.test(hostname) ? hostname : domainToASCII(hostname)
  const labels = ascii.endsWith('.') ? ascii.slice(0, -1).split('.') : ascii.split('.')
  if (ascii.length > 254 || labels.some((l) => l.length === 0 || l.length > 63)) return null
  return labels
}

// A recursive query for (name, type) with an EDNS0 record offering 1,232
// bytes, as c-ares asks. Ids are Math.random's: a forged reply could only set
// the TTL (clamped to [minTtlMs, maxTtlMs]) of addresses getaddrinfo gave.
function encodeQuery (id, labels, type) {
  let length = 12 + 1 + 4 + 11
  for (const label of labels) length += 1 + label.length
  const buf = Buffer.alloc(length)
  buf.writeUInt16BE(id, 0)
  buf.writeUInt16BE(0x0100, 2) // RD
  buf.writeUInt16BE(1, 4) // one question
  buf.writeUInt16BE(1, 10) // one additional: OPT
  let o = 12
  for (const label of labels) {
    buf[o++] = label.length
    o += buf.write(label, o, 'latin1')
  }
  o++ // the root label
  buf.writeUInt16BE(type, o)
  buf.writeUInt16BE(1, o + 2) // IN
  o += 5 // OPT: the root name
  buf.writeUInt16BE(41, o)
  buf.writeUInt16BE(1232, o + 2)
  return buf
}

// The records of `type` in a reply, each with the smallest TTL along its
// CNAME chain (as c-ares gives them); [] for an error, a truncated or a
// malformed reply (no TTL from it), null for a packet that is no reply.
function decodeReply (msg, type) {
  try {
    const flags = msg.readUInt16BE(2)
    if ((flags & 0x8000) === 0) return null
    if ((flags & 0x020f) !== 0) return []
    let o = 12
    for (let i = msg.readUInt16BE(4); i > 0; i--) o = skipName(msg, o) + 4
    const found = []
    let chainTtl = Infinity
    for (let i = msg.readUInt16BE(6); i > 0; i--) {
      o = skipName(msg, o)
      const rtype = msg.readUInt16BE(o)
      const ttl = ttlOf(msg.readUInt32BE(o + 4))
      const length = msg.readUInt16BE(o + 8)
      o += 10
      if (o + length > msg.length) return []
      if (msg.readUInt16BE(o - 8) === 1) {
        if (rtype === TYPE_CNAME) chainTtl = Math.min(chainTtl, ttl)
        else if (rtype === type && length === (type === TYPE_A ? 4 : 16)) found.push({ address: addressAt(msg, o, type), ttl, family: type === TYPE_A ? 4 : 6 })
      }
      o += length
    }
    for (const r of found) r.ttl = Math.min(r.ttl, chainTtl)
    return found
  } catch {
    return []
  }
}

function skipName (msg, o) {
  for (;;) {
    if (o >= msg.length) throw new RangeError('name past the end')
    const length = msg[o]
    if (length === 0) return o + 1
    if ((length & 0xc0) === 0xc0) return o + 2
    o += length + 1
  }
}

// RFC 2181: a TTL with the top bit set is read as 0.
function ttlOf (value) {
  return value > 0x7fffffff ? 0 : value
}

// As getaddrinfo's answers spell it (libuv's inet_ntop, through
// SocketAddress), so the two compare as strings.
function addressAt (msg, o, type) {
  if (type === TYPE_A) return `${msg[o]}.${msg[o + 1]}.${msg[o + 2]}.${msg[o + 3]}`
  const groups = []
  for (let i = 0; i < 16; i += 2) groups.push(msg.readUInt16BE(o + i).toString(16))
  return new (require('node:net').SocketAddress)({ address: groups.join(':'), family: 'ipv6' }).address
}

// "1.2.3.4", "1.2.3.4:5353", "::1", "[::1]:5353", as dns.getServers() gives.
function parseServer (server) {
  if (server[0] === '[') {
    const end = server.indexOf(']')
    return { address: server.slice(1, end), port: Number(server.slice(end + 2)) }
  }
  if (isIP(server) !== 0) return { address: server, port: 53 }
  const colon = server.lastIndexOf(':')
  return { address: server.slice(0, colon), port: Number(server.slice(colon + 1)) }
}

module.exports = { TtlQuery, decodeReply, encodeQuery, parseServer, wireName }
