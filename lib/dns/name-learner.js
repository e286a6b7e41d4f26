'use strict'

const dns = require('node:dns')
const os = require('node:os')
const { searchCandidates } = require('./resolv-conf')
const { addressFamilies } = require('./address-families')

const TYPE_A = 1
const TYPE_AAAA = 28
const RCODE_NXDOMAIN = 3

// Negative answers kept at most (one per candidate name and type).
const MAX_NEGATIVE = 10_000

// Asks the DNS servers what getaddrinfo's DNS backend would find for a name:
// its candidates (search domains, the name as written) in res_search's
// order, the first with records answering, with their TTL. Every query it
// sends is one glibc's res_search sends for the same lookup: the same names,
// in the same order, to the same servers, for no family glibc did not ask.
// A candidate's "no such name" or "no such record" is kept as a caching
// resolver keeps it (RFC 2308: the SOA's minimum, clamped to [minTtlMs,
// maxTtlMs]), so a refresh asks again only the candidates whose negative
// answer has run out: a candidate that starts to exist is seen within that
// bound.
class NameLearner {
  #query // () => TtlQuery
  #counters
  #hostFamilies
  #minTtlMs
  #maxTtlMs
  #negative = new Map() // `${name} ${type}` (type 0: any) -> until (performance.now())

  // `hostFamilies`: () => { v4, v6 }, the families the host has (injectable
  // for tests: a host's own are what they are).
  constructor (query, counters, hostFamilies = addressFamilies, { minTtlMs = 0, maxTtlMs = 300_000 } = {}) {
    this.#query = query
    this.#counters = counters
    this.#hostFamilies = hostFamilies
    this.#minTtlMs = minTtlMs
    this.#maxTtlMs = maxTtlMs
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

  // callback(result): { fqdn, records, ttlMs, tried } for the first candidate
  // with records (`records` in DNS order, A before AAAA; `tried`: the
  // candidates before it, which had none); null when none has any (the
  // answer, if any, came from elsewhere); undefined when a server failed or
  // did not answer (nothing can be said yet). `counter`: the stat its
  // queries count in (ttlQueries to learn, refreshQueries to refresh).
  resolve (hostname, kinds, conf, counter, callback) {
    if (!mayAskDns(hostname)) return process.nextTick(callback, null)
    const candidates = searchCandidates(hostname, conf)
    const servers = serversOf(conf)
    const types = kinds === '46' ? [TYPE_A, TYPE_AAAA] : kinds === '4' ? [TYPE_A] : [TYPE_AAAA]
    const next = (i) => {
      if (i >= candidates.length) return callback(null)
      const fqdn = candidates[i]
      const records = []
      let empty = 0 // queries of this candidate that found nothing
      // Types one after the other: a name that does not exist is known
      // from the first reply, and the next candidate follows at once.
      const ask = (t) => {
        if (t === types.length) {
          if (records.length === 0) {
            this.#counters.searchTries += empty
            return next(i + 1)
          }
          return callback({ fqdn, records, ttlMs: minTtl(records) * 1000, tried: i })
        }
        const type = types[t]
        if (this.#isNegative(fqdn, 0) || this.#isNegative(fqdn, type)) return ask(t + 1)
        this.#counters[counter]++
        this.#one(servers, fqdn, type, (found, rcode, negativeTtl) => {
          if (rcode === RCODE_NXDOMAIN) {
            this.#counters.searchTries += empty + 1
            this.#remember(fqdn, 0, negativeTtl)
            return next(i + 1)
          }
          if (rcode !== 0) return callback(undefined)
          if (found.length === 0) {
            empty++
            this.#remember(fqdn, type, negativeTtl)
          }
          for (const r of found) records.push(r)
          ask(t + 1)
        })
      }
      ask(0)
    }
    next(0)
  }

  #isNegative (name, type) {
    const key = `${name.toLowerCase()} ${type}`
    const until = this.#negative.get(key)
    if (until === undefined) return false
    if (performance.now() < until) return true
    this.#negative.delete(key)
    return false
  }

  #remember (name, type, ttlSeconds) {
    const ms = Math.min(Math.max(ttlSeconds * 1000, this.#minTtlMs), this.#maxTtlMs)
    if (ms <= 0) return
    /* c8 ignore next: a bound for 10,000 distinct missing names, not worth a test's time */
    if (this.#negative.size >= MAX_NEGATIVE) this.#negative.clear()
    this.#negative.set(`${name.toLowerCase()} ${type}`, performance.now() + ms)
  }

  #one (servers, name, type, callback) {
    this.#query().query(servers, name, type === TYPE_A, type === TYPE_AAAA, callback)
  }
}

// Names no DNS server was asked for: localhost (RFC 6761), this host's own
// name where nsswitch puts nss-myhostname before dns (which answers it; with
// "files dns" glibc asks DNS for it like any other name), and .local names where nsswitch puts an
// mDNS service first (RFC 6762). Without one, glibc asks DNS for .local names
// like any other, and Kubernetes' cluster.local depends on it.
function mayAskDns (hostname, services = hostsServices()) {
  const name = (hostname.endsWith('.') ? hostname.slice(0, -1) : hostname).toLowerCase()
  if (name === 'localhost' || name.endsWith('.localhost')) return false
  if ((name === 'local' || name.endsWith('.local')) && services.mdns) return false
  return services.dns && !(services.myhostname && name === os.hostname().toLowerCase())
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
  if (line === null) return { dns: true, mdns: false, myhostname: false }
  const words = line.replace(/#.*/, '').replace(/\[[^\]]*\]/g, ' ').split(/[\s:]+/).slice(1)
  const dns = words.indexOf('dns')
  const myhostname = words.indexOf('myhostname')
  return { dns: dns !== -1, mdns: words.some((w) => w.startsWith('mdns')), myhostname: myhostname !== -1 && (dns === -1 || myhostname < dns) }
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

// Whether the DNS records hold exactly the addresses of getaddrinfo's answer,
// as sets.
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

// Whether getaddrinfo, given `records` in this order now, would answer
// `answer` again. glibc sorts what DNS gives (RFC 6724, a stable sort), so
// an order it produced comes back unchanged when DNS gives it again; and it
// merges the A and AAAA replies, so the order that counts is each family's.
// Same addresses, and within each family the same order: the same answer.
// Anything else (a rotated round-robin, a changed record): not known
// without getaddrinfo.
function sameAnswer (answer, records) {
  if (answer.length !== records.length) return false
  for (const family of [4, 6]) {
    let j = 0
    for (const a of answer) {
      if (a.family !== family) continue
      while (j < records.length && records[j].family !== family) j++
      if (j === records.length || records[j].address !== a.address) return false
      j++
    }
  }
  return true
}

module.exports = { NameLearner, mayAskDns, parseHostsLine, readHostsServices, sameAddresses, sameAnswer, minTtl }
