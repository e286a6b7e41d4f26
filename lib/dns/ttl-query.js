'use strict'

const { isIP } = require('./ip')
const { domainToASCII } = require('node:url')
const { randomFillSync } = require('node:crypto')

const TYPE_A = 1
const TYPE_AAAA = 28
const TYPE_CNAME = 5
const TYPE_SOA = 6
const CLASS_IN = 1

// Tries in flight at most. A query id has 16 bits: past this, a new lookup
// gets no TTL query (its callback has no records, so the answer keeps
// fallbackTtlMs) instead of waiting for a free id. It also keeps the id draw
// short: with at most 1/16 of the ids taken, a draw is free 15 times in 16.
const MAX_IN_FLIGHT = 4096

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
//
// What a reply must match to be taken, as c-ares (same_questions), glibc
// (res_queriesmatch) and Go (checkResponse) check it: the server and port
// asked, the id, and the question (name, type, class IN); records count only
// when owned by the name asked or a name its CNAME chain leads to. Anything
// else is ignored and the try keeps waiting.
class TtlQuery {
  #timeoutMs
  #tries
  #maxInFlight
  #edns
  #sockets = { udp4: null, udp6: null }
  #pending = new Map() // query id -> try in flight
  #head = null // tries in flight, earliest deadline first (a linked list)
  #tail = null
  #timer = null
  #ids = new Uint16Array(256)
  #idsLeft = 0

  // `edns`: whether queries carry an EDNS0 record (glibc sends one only with
  // `options edns0` in resolv.conf; see resolverOptions()).
  constructor ({ timeoutMs, tries, maxInFlight = MAX_IN_FLIGHT, edns = false }) {
    this.#timeoutMs = timeoutMs
    this.#tries = tries
    this.#maxInFlight = maxInFlight
    this.#edns = edns
  }

  // callback(records, rcode, negativeTtl) once, with [{ address, ttl, family }]
  // for what answered, maybe nothing, the last reply's rcode (-1: no reply)
  // and, for a reply without records, how long RFC 2308 lets it be kept:
  // min(SOA TTL, SOA minimum) in seconds, 0 without an SOA.
  query (servers, hostname, want4, want6, callback) {
    const name = wireName(hostname)
    const count = (want4 ? 1 : 0) + (want6 ? 1 : 0)
    if (name === null || servers.length === 0 || count === 0 || this.#pending.size + count > this.#maxInFlight) {
      return process.nextTick(callback, [])
    }
    const lookup = { servers, name, records: [], rcode: -1, negativeTtl: 0, left: count, callback }
    if (want4) this.#send(lookup, TYPE_A, 0)
    if (want6) this.#send(lookup, TYPE_AAAA, 0)
    if (this.#timer === null) this.#arm()
  }

  // Ids come from the CSPRNG, drawn 256 at a time: a reply that guesses one
  // must also name the question and reach the socket's port.
  #nextId () {
    if (this.#idsLeft === 0) {
      randomFillSync(this.#ids)
      this.#idsLeft = this.#ids.length
    }
    return this.#ids[--this.#idsLeft]
  }

  #send (lookup, type, attempt) {
    const server = parseServer(lookup.servers[attempt % lookup.servers.length])
    // Ends: query() keeps the tries in flight to MAX_IN_FLIGHT of 65,536 ids.
    let id
    do id = this.#nextId(); while (this.#pending.has(id))
    const entry = { id, lookup, type, attempt, server, deadline: performance.now() + this.#timeoutMs, next: null }
    this.#pending.set(id, entry)
    if (this.#tail === null) this.#head = entry
    else this.#tail.next = entry
    this.#tail = entry
    if (server === null) return // a server no socket can reach: this try waits out its deadline
    // A send that fails (an unreachable scope, no route) is a try that gets
    // no answer: the deadline moves on. Errors come to the callback; a throw
    // here would be uncaught (this runs from a timer), so none may escape.
    /* c8 ignore next 3: parseServer() leaves nothing dgram refuses at once; the catch is the last guard */
    try {
      this.#socket(isIP(server.address.split('%')[0]) === 6 ? 'udp6' : 'udp4').send(encodeQuery(id, lookup.name, type, this.#edns), server.port, server.address, ignore)
    } catch {}
  }

  // The source port: the socket is never bound by us, so its first send binds
  // it to port 0 and the kernel picks an ephemeral port at random (Linux
  // draws from ip_local_port_range). It stays while queries are in flight and
  // a new one is drawn after every idle spell. c-ares too keeps one socket
  // for many queries; glibc opens one per lookup. One per query would cost a
  // file descriptor per cold name in a burst, for replies that can only set a
  // TTL (clamped to [minTtlMs, maxTtlMs]) of addresses getaddrinfo gave.
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
    if (entry === undefined || rinfo.port !== entry.server.port || !sameHost(rinfo.address, entry.server.address)) return
    const found = decodeReply(msg, entry.type, entry.lookup.name)
    if (found === null) return
    // A truncated reply says nothing about the name.
    entry.lookup.rcode = (msg[2] & 0x02) !== 0 ? -1 : msg[3] & 0x0f
    if (found.length === 0 && entry.lookup.rcode !== -1) entry.lookup.negativeTtl = negativeTtl(msg)
    for (const r of found) entry.lookup.records.push(r)
    this.#done(entry)
  }

  // The try `entry` is over (answered, or out of tries).
  #done (entry) {
    this.#pending.delete(entry.id)
    if (--entry.lookup.left === 0) entry.lookup.callback(entry.lookup.records, entry.lookup.rcode, entry.lookup.negativeTtl)
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

// The name's labels as on the wire, or null for one DNS cannot carry. A
// non-ASCII name is converted as Node converts it for getaddrinfo and c-ares
// (its toASCII is url.domainToASCII, line by line: Node 20 maps ß to ss,
// Node 24 keeps it); one that does not convert is never asked.
function wireName (hostname) {
  // eslint-disable-next-line no-control-regex -- ASCII is what goes as-is
  const ascii = /^[\x00-\x7f]*$/.test(hostname) ? hostname : domainToASCII(hostname)
  const labels = ascii.endsWith('.') ? ascii.slice(0, -1).split('.') : ascii.split('.')
  if (ascii.length > 254 || labels.some((l) => l.length === 0 || l.length > 63)) return null
  return labels
}

// A recursive query for (name, type), with an EDNS0 record offering 1,232
// bytes only when `edns` (as glibc with `options edns0`; without it a reply
// over 512 bytes comes truncated, and gives no TTL).
function encodeQuery (id, labels, type, edns = false) {
  let length = 12 + 1 + 4 + (edns ? 11 : 0)
  for (const label of labels) length += 1 + label.length
  const buf = Buffer.alloc(length)
  buf.writeUInt16BE(id, 0)
  buf.writeUInt16BE(0x0100, 2) // RD
  buf.writeUInt16BE(1, 4) // one question
  if (edns) buf.writeUInt16BE(1, 10) // one additional: OPT
  let o = 12
  for (const label of labels) {
    buf[o++] = label.length
    o += buf.write(label, o, 'latin1')
  }
  o++ // the root label
  buf.writeUInt16BE(type, o)
  buf.writeUInt16BE(CLASS_IN, o + 2)
  if (edns) {
    o += 5 // OPT: the root name
    buf.writeUInt16BE(41, o)
    buf.writeUInt16BE(1232, o + 2)
  }
  return buf
}

// The records of `type` owned by `labels` (the name asked) or a name its
// CNAME chain leads to, each with the smallest TTL along that chain (as
// c-ares gives them); [] for an error, a truncated or a malformed reply (no
// TTL from it); null for a packet that is not the reply to (labels, type):
// no response, another opcode, another question.
function decodeReply (msg, type, labels) {
  try {
    const flags = msg.readUInt16BE(2)
    if ((flags & 0x8000) === 0 || (flags & 0x7800) !== 0) return null
    if (msg.readUInt16BE(4) !== 1) return null
    const asked = nameKey(labels)
    let [owner, o] = readName(msg, 12)
    if (owner !== asked || msg.readUInt16BE(o) !== type || msg.readUInt16BE(o + 2) !== CLASS_IN) return null
    o += 4
    if ((flags & 0x020f) !== 0) return []
    const records = []
    const cnames = new Map() // owner -> { target, ttl }
    for (let i = msg.readUInt16BE(6); i > 0; i--) {
      ;[owner, o] = readName(msg, o)
      const rtype = msg.readUInt16BE(o)
      const rclass = msg.readUInt16BE(o + 2)
      const ttl = ttlOf(msg.readUInt32BE(o + 4))
      const length = msg.readUInt16BE(o + 8)
      o += 10
      if (o + length > msg.length) return []
      if (rclass === CLASS_IN) {
        if (rtype === TYPE_CNAME && !cnames.has(owner)) cnames.set(owner, { target: readName(msg, o)[0], ttl })
        else if (rtype === type && length === (type === TYPE_A ? 4 : 16)) records.push({ owner, address: addressAt(msg, o, type), ttl })
      }
      o += length
    }
    // Follow the chain from the name asked; a loop ends it.
    const chain = new Set([asked])
    let chainTtl = Infinity
    for (let name = asked, link = cnames.get(name); link !== undefined && !chain.has(link.target); link = cnames.get(name)) {
      chainTtl = Math.min(chainTtl, link.ttl)
      name = link.target
      chain.add(name)
    }
    const found = []
    for (const r of records) {
      if (chain.has(r.owner)) found.push({ address: r.address, ttl: Math.min(r.ttl, chainTtl), family: type === TYPE_A ? 4 : 6 })
    }
    return found
  } catch {
    return []
  }
}

// RFC 2308: a negative reply is kept for the smaller of its SOA record's TTL
// and the SOA's MINIMUM field, taken from the authority section; 0 (not kept
// by a caching resolver) without one or in a reply that does not parse.
function negativeTtl (msg) {
  try {
    let o = readName(msg, 12)[1] + 4
    const skip = msg.readUInt16BE(6) // answers (a CNAME to a name that has none)
    let authority = msg.readUInt16BE(8)
    for (let i = 0; i < skip; i++) {
      o = readName(msg, o)[1]
      o += 10 + msg.readUInt16BE(o + 8)
    }
    for (; authority > 0; authority--) {
      o = readName(msg, o)[1]
      const type = msg.readUInt16BE(o)
      const ttl = ttlOf(msg.readUInt32BE(o + 4))
      const length = msg.readUInt16BE(o + 8)
      o += 10
      if (type === TYPE_SOA) {
        // MNAME, RNAME, then SERIAL, REFRESH, RETRY, EXPIRE, MINIMUM.
        const at = readName(msg, readName(msg, o)[1])[1] + 16
        if (at + 4 > o + length) return 0
        return Math.min(ttl, ttlOf(msg.readUInt32BE(at)))
      }
      o += length
    }
  } catch {}
  return 0
}

function ignore () {}

// Whether a reply's sender is the server asked. resolv.conf may spell an
// IPv6 server as glibc reads it (0:0:0:0:0:0:0:1, upper case, a scope by
// index) and the socket reports the sender in its short form, so IPv6
// addresses compare by value, the scope aside (the id, port and question
// still have to match).
function sameHost (from, address) {
  if (from === address) return true
  const bare = address.split('%')[0]
  return isIP(bare) === 6 && shortIPv6(from.split('%')[0]) === shortIPv6(bare)
}

function shortIPv6 (address) {
  return new (require('node:net').SocketAddress)({ address, family: 'ipv6' }).address
}

// A name's key: its labels, length-prefixed, ASCII letters folded (DNS
// compares names so, RFC 4343); other bytes as they are.
function nameKey (labels) {
  let key = ''
  for (const label of labels) key += String.fromCharCode(label.length) + label
  return foldAscii(key)
}

function foldAscii (s) {
  return s.replace(/[A-Z]+/g, (m) => m.toLowerCase())
}

// [the name at `o` as nameKey() spells it, the offset past it], following
// compression pointers (each must point back, so a loop cannot).
function readName (msg, o) {
  let key = ''
  let end = -1
  let limit = o
  for (;;) {
    if (o >= msg.length) throw new RangeError('name past the end')
    const length = msg[o]
    if (length === 0) break
    if ((length & 0xc0) === 0xc0) {
      const target = ((length & 0x3f) << 8) | msg[o + 1]
      if (end === -1) end = o + 2
      if (target >= limit) throw new RangeError('pointer forward')
      o = limit = target
      continue
    }
    if ((length & 0xc0) !== 0 || o + 1 + length > msg.length) throw new RangeError('bad label')
    key += String.fromCharCode(length) + msg.toString('latin1', o + 1, o + 1 + length)
    if (key.length > 255) throw new RangeError('name too long')
    o += 1 + length
  }
  return [foldAscii(key), end === -1 ? o + 1 : end]
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

// What the system resolver sends to the DNS servers for a name that
// getaddrinfo answered, so that a TTL query asks nothing it did not (glibc's
// res_search and nsswitch, as on Linux):
// - a name with fewer dots than `ndots` and no trailing dot was first tried
//   with each search domain; which one answered is unknown, so none is asked
//   (and never the bare name, which may not have been sent at all);
// - `localhost` and names under it are answered by the hosts file or
//   nss-myhostname (RFC 6761), names under `local` by mDNS (RFC 6762): not
//   by the DNS servers.
// The rest was sent as written, to the servers of resolv.conf (which
// dns.getServers() lists), and is asked as written.
function asksAsIs (hostname, ndots) {
  if (hostname.endsWith('.')) hostname = hostname.slice(0, -1)
  else {
    let dots = 0
    for (let i = hostname.indexOf('.'); i !== -1 && dots < ndots; i = hostname.indexOf('.', i + 1)) dots++
    if (dots < ndots) return false
  }
  const name = foldAscii(hostname)
  return !(name === 'localhost' || name.endsWith('.localhost') || name === 'local' || name.endsWith('.local'))
}

// The options of resolv.conf that decide what is sent, read as glibc reads
// them (resolv-conf.js): `ndots` and `edns0`, the file's then RES_OPTIONS's.
// An unreadable file means the defaults.
function resolverOptions (file = '/etc/resolv.conf', env = process.env) {
  let text = ''
  try {
    text = require('node:fs').readFileSync(file, 'latin1')
  } catch {}
  const { ndots, edns } = require('./resolv-conf').parseResolvConf(text, { env, hostname: '' })
  return { ndots, edns }
}

// "1.2.3.4", "1.2.3.4:5353", "::1", "[::1]:5353" (dns.getServers()'s
// forms), and a scoped "fe80::1%eth0" (resolv.conf's): { address, port }, or
// null for anything else, which is never sent to.
function parseServer (server) {
  let address = server
  let port = 53
  if (server[0] === '[') {
    const end = server.indexOf(']')
    address = server.slice(1, end)
    port = server[end + 1] === ':' ? Number(server.slice(end + 2)) : Number.NaN
  } else if (isIP(server.split('%')[0]) === 0) {
    const colon = server.lastIndexOf(':')
    address = server.slice(0, colon)
    port = Number(server.slice(colon + 1))
  }
  if (isIP(address.split('%')[0]) === 0 || !Number.isInteger(port) || port < 1 || port > 65535) return null
  return { address, port }
}

module.exports = { TtlQuery, MAX_IN_FLIGHT, asksAsIs, decodeReply, encodeQuery, negativeTtl, parseServer, resolverOptions, wireName }
