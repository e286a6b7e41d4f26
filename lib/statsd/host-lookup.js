'use strict'

const { isIP } = require('node:net')
const { isExiting } = require('./client-state')

// The `lookup` hot-shots hands to dgram.createSocket. dgram calls it for
// every datagram as lookup(host, family, callback), with the socket's family,
// so a dual-stack name on a udp4 socket gets an IPv4 answer. Answers come from
// the TTL cache (one upstream lookup per TTL expiry, merged, served stale
// while DNS is down); if DNS still fails, the last good address is used.
class HostLookup {
  #cache
  #owned = null
  #counters
  #state
  #known = [null, null] // last good answer per family: [IPv4, IPv6]
  #pending = new Set()

  constructor (cache, counters, state) {
    this.#cache = cache
    this.#counters = counters
    this.#state = state
  }

  #currentCache () {
    // The installed cache closes on uninstall(); its lookup would then pass
    // every datagram to getaddrinfo, so use a private cache from there on.
    if (this.#cache === null || this.#cache.closed === true) {
      // One host: a small LRU (lru-cache allocates maxEntries slots up front).
      this.#cache = this.#owned = require('../dns').createDnsCache({ maxEntries: 16 })
    }
    return this.#cache
  }

  lookup = (hostname, family, callback) => {
    const ipFamily = isIP(hostname)
    // dgram asks for its bind address too; IP literals never touch DNS.
    if (ipFamily !== 0) return callback(null, hostname, ipFamily)
    const slot = family === 6 ? 1 : 0
    const known = this.#known[slot]
    if (isExiting() && known !== null) return callback(null, known.address, known.family)
    this.#counters.lookups++
    const pending = { callback, settled: false }
    this.#pending.add(pending)
    this.#currentCache().lookup(hostname, family, (error, address, answerFamily) => {
      if (pending.settled) return
      pending.settled = true
      this.#pending.delete(pending)
      if (error) {
        this.#counters.lookupErrors++
        const last = this.#known[slot]
        if (last === null) return callback(error)
        this.#counters.lastKnownAddressUses++
        this.#state.publish(error, 'dns')
        return callback(null, last.address, last.family)
      }
      if (known === null || known.address !== address) this.#known[slot] = { address, family: answerFamily }
      callback(null, address, answerFamily)
    })
  }

  // Fails the lookups still in flight (close() past its deadline).
  abort (error) {
    for (const pending of this.#pending) {
      pending.settled = true
      pending.callback(error)
    }
    this.#pending.clear()
  }

  close () {
    this.#owned?.close()
  }
}

module.exports = { HostLookup }
