'use strict'

const { now: clock } = require('../core/timers')
const { channels } = require('../core/diagnostics')

// Servers close idle keep-alive sockets on their own clock (Node and Apache
// 5 s, nginx 75 s, ALB 60 s), often without a `Keep-Alive: timeout=` hint, and
// a request written as the server closes fails. An origin's sockets are
// tracked here: when the server closes a reused socket after it sat idle for
// t ms (seen as its FIN while idle, or as a request failing on it), every idle
// socket of that origin is closed by us after 3/4 t from then on.
const RETIRE_FRACTION = 0.75
// An idle close sooner than this is no idle timer (a server closing after a
// response, or going away) and would turn keep-alive off for the origin.
const MIN_LEARNED_MS = 100

class OriginSockets {
  learnedIdleMs = null
  retireAfterMs = null
  #origin
  #stats
  #learn
  #sockets = new Set()

  constructor (origin, stats, learn) {
    this.#origin = origin
    this.#stats = stats
    this.#learn = learn
  }

  // A socket just connected; returns its state.
  add (socket) {
    const s = { socket, requests: 0, busy: false, idleSince: clock(), armed: false, closing: false }
    this.#sockets.add(s)
    socket.on('end', () => {
      // The server closed it. While idle, after answering with keep-alive:
      // that was its idle timer.
      const learn = !s.busy && !s.closing
      s.closing = true
      if (learn) this.learn(clock() - s.idleSince)
    })
    // Armed only while idle (started() disarms it).
    socket.on('timeout', () => {
      this.#stats.socketsRetired++
      socket.destroy()
    })
    socket.on('close', () => this.#sockets.delete(s))
    return s
  }

  // A request is written on the socket of `s`; returns how long it sat idle
  // (-1 for a fresh socket).
  started (s) {
    const idleMs = s.requests === 0 ? -1 : clock() - s.idleSince
    s.requests++
    s.busy = true
    if (s.armed) {
      s.armed = false
      s.socket.setTimeout(0)
    }
    return idleMs
  }

  // Returns the time it read, so the request's latency shares the one read.
  ended (s) {
    s.busy = false
    const now = s.idleSince = clock()
    if (this.retireAfterMs !== null && !s.closing) this.#arm(s, this.retireAfterMs)
    return now
  }

  // An upgrade or CONNECT takes the socket over: it is no longer ours to
  // retire or to learn from.
  untrack (s) {
    s.closing = true
    s.armed = false
    s.socket.setTimeout(0)
    this.#sockets.delete(s)
  }

  #arm (s, ms) {
    s.armed = true
    s.socket.setTimeout(ms)
  }

  learn (idleMs) {
    if (!this.#learn || idleMs < MIN_LEARNED_MS) return
    if (this.learnedIdleMs !== null && idleMs >= this.learnedIdleMs) return
    this.learnedIdleMs = Math.round(idleMs)
    this.retireAfterMs = Math.floor(idleMs * RETIRE_FRACTION)
    this.#stats.idleClosesLearned++
    if (channels.httpIdleClose.hasSubscribers) {
      channels.httpIdleClose.publish({ origin: this.#origin, idleMs: this.learnedIdleMs, retireAfterMs: this.retireAfterMs })
    }
    // Sockets idle now are as old as the one that was closed, or will be.
    const now = clock()
    for (const s of this.#sockets) {
      if (s.busy || s.closing) continue
      const idle = now - s.idleSince
      if (idle >= this.retireAfterMs) {
        this.#stats.socketsRetired++
        s.socket.destroy()
      } else {
        this.#arm(s, Math.ceil(this.retireAfterMs - idle))
      }
    }
  }
}

module.exports = { OriginSockets, RETIRE_FRACTION, MIN_LEARNED_MS }
