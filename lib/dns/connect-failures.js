'use strict'

// Tells the installed cache when a connection to an address it gave out
// could not be made, so that a moved name is resolved again before its TTL
// runs out (cache.connectFailed()). Node says so for every socket that
// net.connect() or tls.connect() makes, whatever made it (undici, fetch,
// http.Agent, a database driver): the 'net.client.socket' channel hands us
// the socket, its 'lookup' event names the host, and its connection attempts
// say which address failed and why. No 'error' listener is added: one would
// turn a socket error that crashes the process into one that does not.

const dc = require('node:diagnostics_channel')

const CHANNEL = 'net.client.socket'

// The address itself is gone: nothing listens there any more (refused), it
// is no longer routed (unreachable), or it drops the handshake (the kernel's
// connect timeout, or undici's connectTimeoutMs). Left out: errors about
// this host (EADDRNOTAVAIL, EMFILE), about the peer once connected (resets,
// TLS), the application's own abort, and Happy Eyeballs' per-address
// timeout, which only moves on to the next address while the first may
// still answer.
const ADDRESS_GONE = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT'])
const CONNECT_TIMEOUT = 'UND_ERR_CONNECT_TIMEOUT'

// Starts watching; returns the function that stops it.
function watchConnectFailures (cache) {
  // Sockets to an IP literal make no lookup: one listener is all they cost.
  const onSocket = ({ socket }) => socket.once('lookup', onLookup)

  function onLookup (err, address, family, host) {
    if (err) return // no address, so no attempt
    const socket = this
    let attempt = null // the address being connected to, until it answers
    const onAttempt = (address) => { attempt = address }
    const onAttemptFailed = (address, port, family, error) => {
      attempt = null
      if (ADDRESS_GONE.has(error?.code)) cache.connectFailed(host, address)
    }
    // A connect timeout destroys the socket while an attempt is under way.
    const onClose = () => {
      if (attempt !== null && socket.errored?.code === CONNECT_TIMEOUT) cache.connectFailed(host, attempt)
      done()
    }
    // Once connected (or closed) there is nothing left to watch: a socket
    // that lives for hours as a keep-alive connection carries none of these.
    const done = () => {
      socket.removeListener('connectionAttempt', onAttempt)
      socket.removeListener('connectionAttemptFailed', onAttemptFailed)
      socket.removeListener('connect', done)
      socket.removeListener('close', onClose)
    }
    socket.on('connectionAttempt', onAttempt)
    socket.on('connectionAttemptFailed', onAttemptFailed)
    socket.once('connect', done)
    socket.once('close', onClose)
  }

  dc.subscribe(CHANNEL, onSocket)
  return () => dc.unsubscribe(CHANNEL, onSocket)
}

module.exports = { watchConnectFailures, ADDRESS_GONE }
