'use strict'

// The counters behind installation.http.stats(), shared by the interceptor,
// the pools' connectors and the idle-close learning.
function createStats () {
  return {
    requests: 0,
    retries: { staleSocket: 0, connect: 0, status: 0 },
    timeouts: { connect: 0, headers: 0, body: 0, queue: 0, deadline: 0 },
    connectionsOpened: 0,
    budgetRefusals: 0,
    idleClosesLearned: 0,
    socketsRetired: 0,
  }
}

function snapshot (stats) {
  return { ...stats, retries: { ...stats.retries }, timeouts: { ...stats.timeouts } }
}

module.exports = { createStats, snapshot }
