'use strict'

const dns = require('node:dns')

// entry.route: null (not learned yet), ROUTE_SYSTEM (answered by another
// source: getaddrinfo refreshes it), or { fqdn, kinds, conf, hosts }: the
// name DNS answered last, the types asked, and the generations of
// resolv.conf and the hosts file it was learned under.
const ROUTE_SYSTEM = 'system'
// Names remembered for the once-per-name note, at most.
const MAX_SEARCH_NOTES = 10_000

// Where answers come from. The system resolver (the original dns.lookup,
// all: true, verbatim) is the source of the answer, so hosts-file precedence,
// search domains and nsswitch behave exactly as without the cache. DNS
// queries of the name that answered (name-learner.js, asking resolv.conf's
// servers) supply its TTL and refresh it while it is unchanged, and never
// hold the process open. With `servers`
// the answer comes from c-ares alone, asking those servers (hosts file first).
class Upstream {
  #systemLookup
  // The hosts file and the TTL query are made at first use: a process pays
  // at start only for the modules it loads.
  #hosts = null
  #ttlQuery = null
  #resolver = null
  #hostsFile
  #servers
  #queryTimeoutMs
  #fallbackTtlMs
  #minTtlMs
  #maxTtlMs
  #counters
  #conf = null // resolv.conf, read with the first name to learn
  #names = null
  #searched = new Set() // names already pointed out as costing search tries

  constructor ({ servers, queryTimeoutMs, hostsFile, fallbackTtlMs, minTtlMs, maxTtlMs }, systemLookup, counters) {
    this.#minTtlMs = minTtlMs
    this.#maxTtlMs = maxTtlMs
    this.#systemLookup = systemLookup
    this.#servers = servers
    this.#queryTimeoutMs = queryTimeoutMs
    this.#fallbackTtlMs = fallbackTtlMs
    this.#hostsFile = hostsFile
    this.#counters = counters
  }

  // onAnswer(err, addresses) once, with addresses in resolver order; then,
  // after a successful answer, onTtl(ms, source) once. `entry`: the cache's
  // entry being resolved (its answer, if any, and the name it learned).
  resolve (hostname, family, hints, entry, onAnswer, onTtl) {
    if (this.#servers === null) this.#resolveSystem(hostname, family, hints, entry, onAnswer, onTtl)
    else this.#resolveServers(hostname, family, hints, onAnswer, onTtl)
  }

  #hostsOf () {
    this.#hosts ??= new (require('./hosts').HostsFile)(this.#hostsFile, 0)
    return this.#hosts
  }

  // resolv.conf's `edns0`, read with the first query, decides whether
  // queries carry EDNS0 as glibc's do. (Which names are asked follows the
  // search list: name-learner.js.)
  #ttl () {
    if (this.#ttlQuery === null) {
      const { TtlQuery, resolverOptions } = require('./ttl-query')
      const { edns } = resolverOptions()
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

  #resolveSystem (hostname, family, hints, entry, onAnswer, onTtl) {
    // A refresh of a name getaddrinfo answered asks DNS first: an unchanged
    // answer is kept for its new TTL without a getaddrinfo.
    if (entry !== null && entry.answer !== null && entry.route !== ROUTE_SYSTEM) {
      return this.#refresh(hostname, family, hints, entry, onAnswer, onTtl)
    }
    // A miss starts over: what was learned of an answer that is gone says
    // nothing of the next one.
    if (entry !== null && entry.answer === null) entry.route = null
    this.#system(hostname, family, hints, entry, null, onAnswer, onTtl)
  }

  // getaddrinfo answers; then the TTL. `seen`: what a refresh's DNS queries
  // just found ({ fqdn, records, ttlMs, kinds, conf, hosts }), which is the
  // new answer's when getaddrinfo gives the same addresses.
  #system (hostname, family, hints, entry, seen, onAnswer, onTtl) {
    this.#counters.upstreamLookups++
    const previous = entry?.answer ?? null
    this.#systemLookup(hostname, { family, hints, all: true, order: 'verbatim' }, (err, addresses) => {
      if (err) return onAnswer(err)
      onAnswer(null, addresses)
      // Another source's answer changed: what it is now is learnt again.
      if (entry?.route === ROUTE_SYSTEM && previous !== null && !require('./name-learner').sameAddresses(previous, addresses)) entry.route = null
      this.#ttlFor(hostname, family, hints, entry, addresses, seen, onTtl)
    })
  }

  #resolvConf () {
    this.#conf ??= new (require('./resolv-conf').ResolvConf)()
    return this.#conf
  }

  #learner () {
    this.#names ??= new (require('./name-learner').NameLearner)(() => this.#ttl(), this.#counters, undefined, { minTtlMs: this.#minTtlMs, maxTtlMs: this.#maxTtlMs })
    return this.#names
  }

  #ttlFor (hostname, family, hints, entry, addresses, seen, onTtl) {
    const hosts = this.#hostsOf()
    hosts.lookup(hostname, (fromHosts) => {
      // A name in the hosts file (for the family asked) never causes a DNS
      // query: the system resolver answered it from the file (a V4MAPPED ::ffff:127.0.0.1 for
      // the file's 127.0.0.1 too), and a file has no TTL to ask for.
      if (answersFromFile(fromHosts, family, hints)) {
        if (entry !== null) entry.route = null
        return onTtl(this.#fallbackTtlMs, 'hosts')
      }
      if (entry === null || entry.route === ROUTE_SYSTEM) return onTtl(this.#fallbackTtlMs, 'fallback')
      const { mayAskDns, sameAddresses } = require('./name-learner')
      if (!mayAskDns(hostname)) {
        entry.route = ROUTE_SYSTEM
        return onTtl(this.#fallbackTtlMs, 'fallback')
      }
      if (seen !== null && seen.hosts === hosts.generation) {
        // The answer changed, and DNS had already said so: its TTL stands.
        if (sameAddresses(addresses, seen.records)) {
          this.#learned(hostname, entry, seen)
          return onTtl(seen.ttlMs, 'dns')
        }
        // getaddrinfo, asked just after DNS, answers otherwise: another
        // source (an NSS service) answers it, refreshed by getaddrinfo.
        entry.route = ROUTE_SYSTEM
        return onTtl(this.#fallbackTtlMs, 'fallback')
      }
      entry.route = null
      // Learning the TTL costs what a refresh costs, and no TTL is kept for
      // less than minTtlMs: the entry's first refresh, at minTtlMs, learns
      // it. A name used once never pays for it.
      if (this.#minTtlMs > 0) return onTtl(this.#minTtlMs, 'pending')
      this.#resolvConf().current((conf) => {
        const kinds = this.#learner().families(family, hints, conf)
        if (kinds === null) {
          entry.route = ROUTE_SYSTEM
          return onTtl(this.#fallbackTtlMs, 'fallback')
        }
        const generation = this.#resolvConf().generation
        this.#learner().resolve(hostname, kinds, conf, 'ttlQueries', (found) => {
          if (found === null) entry.route = ROUTE_SYSTEM
          if (!found || !sameAddresses(addresses, found.records)) return onTtl(this.#fallbackTtlMs, 'fallback')
          this.#learned(hostname, entry, { ...found, kinds, conf: generation, hosts: hosts.generation }, conf)
          onTtl(found.ttlMs, 'dns')
        })
      })
    })
  }

  // `entry` is answered by DNS through `seen.fqdn`.
  #learned (hostname, entry, seen, conf = this.#resolvConf().config) {
    const first = entry.route === null || entry.route === ROUTE_SYSTEM || entry.route.fqdn !== seen.fqdn
    entry.route = { fqdn: seen.fqdn, kinds: seen.kinds, conf: seen.conf, hosts: seen.hosts }
    const asWritten = hostname.endsWith('.') ? hostname.slice(0, -1) : hostname
    if (first && seen.fqdn.toLowerCase() !== asWritten.toLowerCase()) this.#onSearch(hostname, seen, conf)
  }

  // Once per name: the search domains it costs, and the spelling that avoids them.
  #onSearch (hostname, found, conf) {
    const key = hostname.toLowerCase()
    if (this.#searched.has(key)) return
    /* c8 ignore next: a bound for 10,000 distinct short names, not worth a test's time */
    if (this.#searched.size >= MAX_SEARCH_NOTES) this.#searched.clear()
    this.#searched.add(key)
    this.#counters.searchLearned++
    const channel = require('../core/diagnostics').channels.dnsSearch
    if (found.tried > 0 && channel.hasSubscribers) {
      channel.publish({ hostname, fqdn: found.fqdn, triedBefore: found.tried, ndots: conf.ndots, ttlMs: found.ttlMs })
    }
  }

  // A refresh through DNS: the candidates glibc's res_search would ask now,
  // in its order, each one's negative answer kept for its RFC 2308 TTL, so
  // that a candidate before the learned one that starts to exist is seen.
  // The same addresses in the same order (sameAnswer()): kept without a
  // getaddrinfo. Anything else (the hosts file lists the name, resolv.conf
  // or the hosts file changed, another candidate answers, the addresses or
  // their order changed): getaddrinfo, as at first.
  #refresh (hostname, family, hints, entry, onAnswer, onTtl) {
    // The answer being refreshed, as it is now: it is what DNS must confirm.
    const cached = entry.answer
    const hosts = this.#hostsOf()
    hosts.lookup(hostname, (fromHosts) => {
      if (answersFromFile(fromHosts, family, hints)) return this.#system(hostname, family, hints, entry, null, onAnswer, onTtl)
      this.#resolvConf().current((conf) => {
        const learner = this.#learner()
        const kinds = learner.families(family, hints, conf)
        if (kinds === null) {
          entry.route = ROUTE_SYSTEM
          return this.#system(hostname, family, hints, entry, null, onAnswer, onTtl)
        }
        const route = entry.route
        const generation = this.#resolvConf().generation
        const hostsGeneration = hosts.generation
        learner.resolve(hostname, kinds, conf, route === null ? 'ttlQueries' : 'refreshQueries', (found) => {
          if (found === null) {
            // No candidate has it: another source answers (an NSS service).
            entry.route = ROUTE_SYSTEM
            return this.#system(hostname, family, hints, entry, null, onAnswer, onTtl)
          }
          if (found === undefined) return this.#system(hostname, family, hints, entry, null, onAnswer, onTtl)
          const seen = { ...found, kinds, conf: generation, hosts: hostsGeneration }
          const moved = route !== null && (route.conf !== generation || route.hosts !== hostsGeneration || route.kinds !== kinds)
          if (moved || !require('./name-learner').sameAnswer(cached, found.records)) {
            return this.#system(hostname, family, hints, entry, seen, onAnswer, onTtl)
          }
          this.#learned(hostname, entry, seen, conf)
          this.#counters.refreshesKept++
          onAnswer(null, cached)
          onTtl(found.ttlMs, 'dns')
        })
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

// Whether getaddrinfo answers (family, hints) from the hosts file, which
// lists `addresses` for the name: it asks the file for the family it wants
// (both for 0, unless ADDRCONFIG narrows it to the one family the host has;
// with V4MAPPED, IPv4 too), and DNS when the file has none.
function answersFromFile (addresses, family, hints) {
  if (addresses === undefined) return false
  if (family === 6 && (hints & dns.V4MAPPED) !== 0) return true
  if (family === 0 && (hints & dns.ADDRCONFIG) !== 0) {
    const { v4, v6 } = require('./address-families').addressFamilies()
    /* c8 ignore next: an IPv6-only host, which no test namespace has; the IPv4-only one is tested */
    if (v4 !== v6) family = v4 ? 4 : 6
  }
  return family === 0 || addresses.some((a) => a.family === family)
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
