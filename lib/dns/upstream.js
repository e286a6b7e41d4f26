'use strict'

const dns = require('node:dns')

// entry.route: null (not learned yet), ROUTE_SYSTEM (answered by another
// source: getaddrinfo refreshes it), or { fqdn, kinds, conf, hosts }: the
// name DNS answered, the types asked, and the generations of resolv.conf
// and the hosts file it was learned under.
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
  #counters
  #conf = null // resolv.conf, read with the first name to learn
  #names = null
  #searched = new Set() // names already pointed out as costing search tries

  constructor ({ servers, queryTimeoutMs, hostsFile, fallbackTtlMs, minTtlMs }, systemLookup, counters) {
    this.#minTtlMs = minTtlMs
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
    this.#hosts ??= new (require('./hosts').HostsFile)(this.#hostsFile, this.#fallbackTtlMs)
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
    this.#system(hostname, family, hints, entry, null, onAnswer, onTtl)
  }

  // getaddrinfo answers; then the TTL. `seen`: the records a direct refresh
  // just found, which may already be the new answer's.
  #system (hostname, family, hints, entry, seen, onAnswer, onTtl) {
    this.#counters.upstreamLookups++
    this.#systemLookup(hostname, { family, hints, all: true, order: 'verbatim' }, (err, addresses) => {
      if (err) return onAnswer(err)
      onAnswer(null, addresses)
      this.#ttlFor(hostname, family, hints, entry, addresses, seen, onTtl)
    })
  }

  #resolvConf () {
    this.#conf ??= new (require('./resolv-conf').ResolvConf)()
    return this.#conf
  }

  #learner () {
    this.#names ??= new (require('./name-learner').NameLearner)(() => this.#ttl(), this.#counters)
    return this.#names
  }

  #ttlFor (hostname, family, hints, entry, addresses, seen, onTtl) {
    const hosts = this.#hostsOf()
    hosts.lookup(hostname, (fromHosts) => {
      // A name in the hosts file never causes a DNS query: the system
      // resolver answered it from the file (a V4MAPPED ::ffff:127.0.0.1 for
      // the file's 127.0.0.1 too), and a file has no TTL to ask for.
      if (fromHosts !== undefined) {
        if (entry !== null) entry.route = null
        return onTtl(this.#fallbackTtlMs, 'hosts')
      }
      if (entry === null || entry.route === ROUTE_SYSTEM) return onTtl(this.#fallbackTtlMs, 'fallback')
      if (!require('./name-learner').mayAskDns(hostname)) {
        entry.route = ROUTE_SYSTEM
        return onTtl(this.#fallbackTtlMs, 'fallback')
      }
      const route = entry.route
      if (route !== null && seen !== null && route.hosts === hosts.generation &&
        require('./name-learner').sameAddresses(addresses, seen)) {
        // The answer changed, and DNS had already said so: its TTL stands.
        return onTtl(require('./name-learner').minTtl(seen) * 1000, 'dns')
      }
      entry.route = null
      // Learning the TTL costs what a refresh costs, and no TTL is kept for
      // less than minTtlMs: the entry's first refresh, at minTtlMs, learns
      // it. A name used once never pays for it.
      if (this.#minTtlMs > 0) return onTtl(this.#minTtlMs, 'pending')
      this.#resolvConf().current((conf) => this.#learn(hostname, family, hints, entry, addresses, conf, hosts.generation, onTtl))
    })
  }

  // Finds which name answered `addresses`; onTtl with its TTL, or
  // fallbackTtlMs if none did. Returns through `onTtl` only.
  #learn (hostname, family, hints, entry, addresses, conf, hostsGeneration, onTtl, onLearned = null) {
    const learner = this.#learner()
    const kinds = learner.families(family, hints, conf)
    if (kinds === null) {
      entry.route = ROUTE_SYSTEM
      return onLearned ? onLearned(false) : onTtl(this.#fallbackTtlMs, 'fallback')
    }
    const generation = this.#resolvConf().generation
    learner.learn(hostname, kinds, addresses, conf, (found) => {
      if (found === undefined) return onLearned ? onLearned(false) : onTtl(this.#fallbackTtlMs, 'fallback')
      if (found === null) {
        // Another source (an NSS service, a server whose answers differ
        // each time): getaddrinfo answers it, kept fallbackTtlMs.
        entry.route = ROUTE_SYSTEM
        return onLearned ? onLearned(false) : onTtl(this.#fallbackTtlMs, 'fallback')
      }
      entry.route = { fqdn: found.fqdn, kinds, conf: generation, hosts: hostsGeneration }
      const asWritten = hostname.endsWith('.') ? hostname.slice(0, -1) : hostname
      if (found.fqdn.toLowerCase() !== asWritten.toLowerCase()) this.#onSearch(hostname, found, conf)
      if (onLearned) onLearned(true)
      onTtl(found.ttlMs, 'dns')
    })
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

  // A refresh through DNS: the learned name, or, for an entry not learned
  // yet, the search its getaddrinfo made. Anything changed (the hosts file,
  // resolv.conf, the families asked, the answer): getaddrinfo, as at first.
  #refresh (hostname, family, hints, entry, onAnswer, onTtl) {
    // The answer being refreshed, as it is now: it is what DNS must confirm.
    const cached = entry.answer
    const hosts = this.#hostsOf()
    hosts.lookup(hostname, (fromHosts) => {
      if (fromHosts !== undefined) return this.#system(hostname, family, hints, entry, null, onAnswer, onTtl)
      this.#resolvConf().current((conf) => {
        const route = entry.route
        if (route === null) {
          return this.#learn(hostname, family, hints, entry, cached, conf, hosts.generation, onTtl, (kept) => {
            if (kept) {
              this.#counters.refreshesKept++
              onAnswer(null, cached)
            } else this.#system(hostname, family, hints, entry, null, onAnswer, onTtl)
          })
        }
        const kinds = this.#learner().families(family, hints, conf)
        if (route.conf !== this.#resolvConf().generation || route.hosts !== hosts.generation || route.kinds !== kinds) {
          return this.#system(hostname, family, hints, entry, null, onAnswer, onTtl)
        }
        const { sameAddresses, minTtl } = require('./name-learner')
        this.#learner().refresh(route.fqdn, kinds, conf, (records) => {
          if (records !== null && records.length > 0 && sameAddresses(cached, records)) {
            this.#counters.refreshesKept++
            onAnswer(null, cached)
            return onTtl(minTtl(records) * 1000, 'dns')
          }
          this.#system(hostname, family, hints, entry, records, onAnswer, onTtl)
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
