'use strict'

const dgram = require('node:dgram')
const { isIP, SocketAddress } = require('node:net')
const { domainToASCII } = require('node:url')

const TYPE_A = 1
const TYPE_AAAA = 28
const TYPE_CNAME = 5

// Asks DNS for the TTLs of a name's A and/or AAAA records, beside the
// getaddrinfo that gave the answer. The answer is already with its callers;
// the TTL only says how long to keep it, so waiting for one must never keep
// the process alive: the socket and the timer are unref'd (a c-ares Resolver
// cannot be). Each try asks the next of `servers` (dns.getServers()'s form)
// and waits `timeoutMs`; `tries` tries in all. callback(records) once, with
// [{ address, ttl, family }] for what answered, maybe nothing.
function queryTtl (servers, hostname, want4, want6, timeoutMs, tries, callback) {
  const name = wireName(hostname)
  if (name === null || servers.length === 0) return process.nextTick(callback, [])
  const pending = new Map() // query id -> type, for the types not answered yet
  const records = []
  let attempt = 0
  let socket = null
  let timer = null

  const finish = () => {
    clearTimeout(timer)
    socket.close()
    callback(records)
  }
  const next = () => {
    if (socket !== null) socket.close()
    if (attempt === tries) {
      socket = null
      return callback(records)
    }
    const server = parseServer(servers[attempt % servers.length])
    attempt++
    const types = pending.size === 0 ? [want4 && TYPE_A, want6 && TYPE_AAAA].filter(Boolean) : [...pending.values()]
    pending.clear()
    socket = dgram.createSocket(isIP(server.address) === 6 ? 'udp6' : 'udp4')
    socket.unref()
    // A send that fails (no route) is a try that gets no answer.
    socket.on('error', () => {})
    socket.on('message', (msg, rinfo) => {
      if (rinfo.address !== server.address || rinfo.port !== server.port || msg.length < 2) return
      const type = pending.get(msg.readUInt16BE(0))
      if (type === undefined) return
      const found = decodeReply(msg, type)
      if (found === null) return
      pending.delete(msg.readUInt16BE(0))
      for (const r of found) records.push(r)
      if (pending.size === 0) finish()
    })
    for (const type of types) {
      let id
      do id = Math.floor(Math.random() * 65536); while (pending.has(id))
      pending.set(id, type)
      socket.send(encodeQuery(id, name, type), server.port, server.address)
    }
    timer = setTimeout(next, timeoutMs)
    timer.unref()
  }
  next()
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
// bytes, as c-ares asks.
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
  return new SocketAddress({ address: groups.join(':'), family: 'ipv6' }).address
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

module.exports = { queryTtl, decodeReply, encodeQuery, parseServer, wireName }
