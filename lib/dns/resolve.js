'use strict'

const dns = require('node:dns')

// Where answers come from. The system resolver (the original dns.lookup,
// all: true, verbatim) is the source of the answer, so hosts-file precedence,
// search domains and nsswitch behave exactly as without the cache. A DNS
// query beside it (ttl-query.js, asking dns.getServers()) supplies the TTL
// once the answer is known, and never holds the process open. With `servers`
// the answer comes from c-ares alone, asking those servers (hosts file first).
class Upstream {
  #systemLookup
  // The hosts file and the TTL query are made at first use: a process pays
  // at start only for the modules it loads.
  #hosts = null
  #ttlQuery = null
  #ndots = 1
  #resolver = null
  #hostsFile
  #servers
  #queryTimeoutMs
  #fallbackTtlMs
  #counters

  constructor ({ servers, queryTimeoutMs, hostsFile, fallbackTtlMs }, systemLookup, counters) {
    this.#systemLookup = systemLookup
    this.#servers = servers
    this.#queryTimeoutMs = queryTimeoutMs
    this.#fallbackTtlMs = fallbackTtlMs
    this.#hostsFile = hostsFile
    this.#counters = counters
  }

  // onAnswer(err, addresses) once, with addresses in resolver order; then,
  // after a successful answer, onTtl(ms, source) once.
  resolve (hostname, family, hints, onAnswer, onTtl) {
    if (this.#servers === null) this.#resolveSystem(hostname, family, hints, onAnswer, onTtl)
    else this.#resolveServers(hostname, family, hints, onAnswer, onTtl)
  }

  #hostsOf () {
    this.#hosts ??= new (require('./hosts').HostsFile)(this.#hostsFile, this.#fallbackTtlMs)
    return this.#hosts
  }

  // resolv.conf is read once, with the first TTL query: its `ndots` and
  // `edns0` decide what may be sent (ttl-query.js, asksAsIs()).
  #ttl () {
    if (this.#ttlQuery === null) {
      const { TtlQuery, resolverOptions } = require('./ttl-query')
      const { ndots, edns } = resolverOptions()
      this.#ndots = ndots
      this.#ttlQuery = new TtlQuery({ timeoutMs: this.#queryTimeoutMs, tries: 2, edns })
    }
    return this.#ttlQuery
  }

  #cares () {
    if (this.#resolver === null) {
      this.#resolver = new dns.Resolver({ timeout: this.#queryTimeoutMs, tries: 2 })
      this.#resolver.setServers(this.#servers)
    }
    return this.#resolver
  }

  #resolveSystem (hostname, family, hints, onAnswer, onTtl) {
    this.#counters.upstreamLookups++
    this.#systemLookup(hostname, { family, hints, all: true, order: 'verbatim' }, (err, addresses) => {
      if (err) return onAnswer(err)
      onAnswer(null, addresses)
      this.#ttlFor(hostname, addresses, onTtl)
    })
  }

  #ttlFor (hostname, addresses, onTtl) {
    this.#hostsOf().lookup(hostname, (fromHosts) => {
      // A name in the hosts file never causes a DNS query: the system
      // resolver answered it from the file (a V4MAPPED ::ffff:127.0.0.1 for
      // the file's 127.0.0.1 too), and a file has no TTL to ask for.
      if (fromHosts !== undefined) return onTtl(this.#fallbackTtlMs, 'hosts')
      // Nor one the system resolver did not send as written to the DNS servers.
      const query = this.#ttl()
      if (!require('./ttl-query').asksAsIs(hostname, this.#ndots)) return onTtl(this.#fallbackTtlMs, 'fallback')
      const wanted = new Set()
      let want4 = false
      let want6 = false
      for (const a of addresses) {
        const v4 = a.family === 6 && a.address.startsWith('::ffff:') && a.address.includes('.')
          ? a.address.slice(7)
          : null
        wanted.add(v4 ?? a.address)
        if (a.family === 4 || v4 !== null) want4 = true
        else want6 = true
      }
      if (want4) this.#counters.ttlQueries++
      if (want6) this.#counters.ttlQueries++
      query.query(dns.getServers(), hostname, want4, want6, (records) => {
        let ttl = Infinity
        let matched = false
        for (const r of records) {
          if (wanted.has(r.address)) matched = true
          if (r.ttl < ttl) ttl = r.ttl
        }
        if (matched) onTtl(ttl * 1000, 'dns')
        else onTtl(this.#fallbackTtlMs, 'fallback')
      })
    })
  }

  // callback(records, errors): A and/or AAAA records with TTLs, and errors,
  // from c-ares asking `servers`.
  #queryServers (hostname, want4, want6, callback) {
    const resolver = this.#cares()
    // Per family, joined A first whichever reply came first, so the order of
    // an answer does not change from one refresh to the next.
    const byFamily = { 4: [], 6: [] }
    const errors = []
    let pending = (want4 ? 1 : 0) + (want6 ? 1 : 0)
    const done = (family) => (err, list) => {
      if (err) errors.push(err)
      else for (const r of list) byFamily[family].push({ address: r.address, ttl: r.ttl, family })
      if (--pending === 0) callback(byFamily[4].concat(byFamily[6]), errors)
    }
    if (want4) {
      this.#counters.ttlQueries++
      resolver.resolve4(hostname, { ttl: true }, done(4))
    }
    if (want6) {
      this.#counters.ttlQueries++
      resolver.resolve6(hostname, { ttl: true }, done(6))
    }
  }

  #resolveServers (hostname, family, hints, onAnswer, onTtl) {
    this.#hostsOf().lookup(hostname, (fromHosts) => {
      const mapped = family === 6 && (hints & dns.V4MAPPED) !== 0
      let local = fromHosts?.filter((a) => family === 0 || a.family === family)
      // As getaddrinfo: V4MAPPED maps the IPv4 addresses when there is no IPv6 one.
      if (mapped && local?.length === 0) local = fromHosts.map((a) => ({ address: `::ffff:${a.address}`, family: 6 }))
      if (local !== undefined && local.length > 0) {
        onAnswer(null, local.map((a) => ({ address: a.address, family: a.family })))
        return onTtl(this.#fallbackTtlMs, 'hosts')
      }
      this.#queryServers(hostname, family !== 6 || mapped, family !== 4, (records, errors) => {
        let answer = records.filter((r) => family === 0 || r.family === family)
        if (answer.length === 0 && mapped) {
          answer = records.map((r) => ({ address: `::ffff:${r.address}`, family: 6, ttl: r.ttl }))
        }
        if (answer.length === 0) return onAnswer(pickError(errors))
        let ttl = Infinity
        for (const r of answer) if (r.ttl < ttl) ttl = r.ttl
        onAnswer(null, answer.map((r) => ({ address: r.address, family: r.family })))
        onTtl(ttl * 1000, 'dns')
      })
    })
  }
}

// A transient error (timeout, SERVFAIL, refused) says more than "no such
// name", so it wins; both pass through as c-ares made them. (An empty answer
// always comes with at least one error: every family asked either answered
// or failed.)
function pickError (errors) {
  return errors.find((e) => !isNotFound(e)) ?? errors[0]
}

// Authoritative "no such name / no such record": the answer is gone, so it
// replaces a cached answer instead of being ridden out with a stale one.
function isNotFound (err) {
  return err.code === 'ENOTFOUND' || err.code === 'ENODATA'
}

module.exports = { Upstream, isNotFound }
