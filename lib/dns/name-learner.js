'use strict'

const dns = require('node:dns')
const os = require('node:os')
const { searchCandidates } = require('./resolv-conf')
const { addressFamilies } = require('./address-families')

const TYPE_A = 1
const TYPE_AAAA = 28
const RCODE_NXDOMAIN = 3

// Learns which name the DNS servers answered for a name getaddrinfo resolved
// (through a search domain or as written), with its TTL, and refreshes an
// entry by asking that name directly. Every query it sends is one glibc's
// res_search sent for the same lookup: the same names, in the same order, to
// the same servers, for no family glibc did not ask.
class NameLearner {
  #query // () => TtlQuery
  #counters
  #hostFamilies

  // `hostFamilies`: () => { v4, v6 }, the families the host has (injectable
  // for tests: a host's own are what they are).
  constructor (query, counters, hostFamilies = addressFamilies) {
    this.#query = query
    this.#counters = counters
    this.#hostFamilies = hostFamilies
  }

  // Which record types getaddrinfo asked for (family, hints) under `conf`:
  // '4', '6', '46', or null where a direct query cannot stand in for it
  // (V4MAPPED answers, a family the host cannot use).
  families (family, hints, conf) {
    if (family === 6 && (hints & dns.V4MAPPED) !== 0) return null
    const addrconfig = (hints & dns.ADDRCONFIG) !== 0
    const host = addrconfig ? this.#hostFamilies() : null
    if (family === 4) return addrconfig && !host.v4 ? null : '4'
    if (family === 6) return conf.noAaaa || (addrconfig && !host.v6) ? null : '6'
    let a = true
    let aaaa = !conf.noAaaa
    // glibc narrows an unspecified family to the one the host has, and only
    // when it has exactly one.
    if (addrconfig && host.v4 !== host.v6) {
      a = host.v4
      aaaa = aaaa && host.v6
    }
    return a && aaaa ? '46' : a ? '4' : aaaa ? '6' : null
  }

  // callback(result): { fqdn, ttlMs, tried } when a candidate answered with
  // exactly `answer`'s addresses (`tried`: how many candidates before it had
  // no such name); null when the first candidate that answered gave other
  // addresses, or none did (the answer came from elsewhere); undefined when a
  // server failed or did not answer (nothing can be said yet).
  learn (hostname, kinds, answer, conf, callback) {
    if (!mayAskDns(hostname)) return process.nextTick(callback, null)
    const candidates = searchCandidates(hostname, conf)
    const servers = serversOf(conf)
    const types = kinds === '46' ? [TYPE_A, TYPE_AAAA] : kinds === '4' ? [TYPE_A] : [TYPE_AAAA]
    const next = (i) => {
      if (i >= candidates.length) return callback(null)
      const fqdn = candidates[i]
      const records = []
      // Types one after the other: a name that does not exist is known
      // from the first reply, and the next candidate follows at once.
      const ask = (t) => {
        if (t === types.length) {
          if (records.length === 0) {
            this.#counters.searchTries += types.length
            return next(i + 1)
          }
          if (!sameAddresses(answer, records)) return callback(null)
          return callback({ fqdn, ttlMs: minTtl(records) * 1000, tried: i })
        }
        this.#counters.ttlQueries++
        this.#one(servers, fqdn, types[t], (found, rcode) => {
          if (rcode === RCODE_NXDOMAIN) {
            this.#counters.searchTries += t + 1
            return next(i + 1)
          }
          if (rcode !== 0) return callback(undefined)
          for (const r of found) records.push(r)
          ask(t + 1)
        })
      }
      ask(0)
    }
    next(0)
  }

  // callback(records | null): the records of `fqdn` for `kinds`, asked at
  // once, or null when any query failed.
  refresh (fqdn, kinds, conf, callback) {
    const servers = serversOf(conf)
    const types = kinds === '46' ? [TYPE_A, TYPE_AAAA] : kinds === '4' ? [TYPE_A] : [TYPE_AAAA]
    const records = []
    let left = types.length
    let failed = false
    for (const type of types) {
      this.#counters.refreshQueries++
      this.#one(servers, fqdn, type, (found, rcode) => {
        if (rcode !== 0) failed = true
        else for (const r of found) records.push(r)
        if (--left === 0) callback(failed ? null : records)
      })
    }
  }

  #one (servers, name, type, callback) {
    this.#query().query(servers, name, type === TYPE_A, type === TYPE_AAAA, callback)
  }
}

// Names no DNS server was asked for: localhost (RFC 6761), this host's own
// name (nss-myhostname answers it), and .local names where nsswitch puts an
// mDNS service first (RFC 6762). Without one, glibc asks DNS for .local names
// like any other, and Kubernetes' cluster.local depends on it.
function mayAskDns (hostname, services = hostsServices()) {
  const name = (hostname.endsWith('.') ? hostname.slice(0, -1) : hostname).toLowerCase()
  if (name === 'localhost' || name.endsWith('.localhost')) return false
  if ((name === 'local' || name.endsWith('.local')) && services.mdns) return false
  return services.dns && name !== os.hostname().toLowerCase()
}

// The hosts line of /etc/nsswitch.conf, read once: whether DNS is asked at
// all, and whether an mDNS service is. No file means glibc's default, "dns
// files".
let services = null
function hostsServices () {
  services ??= readHostsServices('/etc/nsswitch.conf')
  return services
}

function readHostsServices (file) {
  let line = null
  try {
    line = require('node:fs').readFileSync(file, 'latin1').split('\n').find((l) => /^\s*hosts\s*:/.test(l)) ?? null
  } catch {}
  return parseHostsLine(line)
}

function parseHostsLine (line) {
  if (line === null) return { dns: true, mdns: false }
  const words = line.replace(/#.*/, '').replace(/\[[^\]]*\]/g, ' ').split(/[\s:]+/).slice(1)
  return { dns: words.includes('dns'), mdns: words.some((w) => w.startsWith('mdns')) }
}

// glibc asks 127.0.0.1 when resolv.conf names no server.
function serversOf (conf) {
  return conf.nameservers.length > 0 ? conf.nameservers : ['127.0.0.1']
}

function minTtl (records) {
  let ttl = Infinity
  for (const r of records) if (r.ttl < ttl) ttl = r.ttl
  return ttl
}

// Whether the DNS records hold exactly the addresses of getaddrinfo's answer
// (as sets: glibc sorts what DNS gives, RFC 6724).
function sameAddresses (answer, records) {
  const wanted = new Set()
  for (const a of answer) wanted.add(a.address)
  const seen = new Set()
  for (const r of records) {
    if (!wanted.has(r.address)) return false
    seen.add(r.address)
  }
  return seen.size === wanted.size
}

module.exports = { NameLearner, mayAskDns, parseHostsLine, readHostsServices, sameAddresses, minTtl }
