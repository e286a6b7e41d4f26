'use strict'

const path = require('node:path')

// kafkajs's idempotent producer keeps a lock per broker in a plain object,
// made on first use as `locks[nodeId] || new Lock()`: while
// Object.prototype[nodeId] is set (a moment's pollution), that value is
// stored as the lock, and every later request to the broker fails on it for
// good. Only a fresh producer id makes the locks (and sequences) anew: the
// attempt fails as retriable, and the next one asks for it before it takes
// any lock, once every request of this one has settled (kafkajs's own would
// otherwise release a lock that is gone), so that the first send after the
// pollution is gone succeeds.
function unpoisoned (eosManager, dir) {
  const guarded = Object.create(eosManager)
  let poisoned = false
  let renewal = null
  guarded.acquireBrokerLock = async function (broker) {
    if (poisoned) {
      poisoned = false
      renewal = eosManager.initProducerId().finally(() => { renewal = null })
    }
    if (renewal !== null) await renewal
    try {
      return await eosManager.acquireBrokerLock(broker)
    } catch (error) {
      if (!(error instanceof TypeError) || !eosManager.isInitialized() || eosManager.isTransactional()) throw error
      poisoned = true
      const { KafkaJSError } = require(path.join(dir, 'src', 'errors'))
      throw new KafkaJSError(error, { retriable: true, cause: error })
    }
  }
  return guarded
}

module.exports = { unpoisoned }
