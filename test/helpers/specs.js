'use strict'

// Every module's option spec, as install() and the factories resolve them:
// one list for the tests that walk them all.
module.exports = {
  dns: require('../../lib/dns/options').spec,
  http: require('../../lib/http/options').spec,
  monitor: require('../../lib/monitor').spec,
  batch: require('../../lib/batch').spec,
  kafka: require('../../lib/kafka').spec,
  statsd: require('../../lib/statsd').spec,
  sink: require('../../lib/http/sink').spec,
}
