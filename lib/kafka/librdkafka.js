'use strict'

// Producers built on librdkafka, recognised by shape (their packages load a
// native addon; the wrapper needs only the instance). librdkafka batches
// itself per partition (linger.ms, batch.size): batching its sends again only
// adds a linger, and its KafkaJS-compatible sendBatch() refuses the `acks`
// every wrapped request carries.

// The name a refusal gives, or null for a producer not built on librdkafka.
function librdkafkaClientOf (producer) {
  // @confluentinc/kafka-javascript's KafkaJS API: kafkajs's methods, plus
  // these two of its own (the librdkafka client under it, an admin on it).
  if (typeof producer.sendBatch === 'function' &&
    (typeof producer.dependentAdmin === 'function' || typeof producer._getInternalClient === 'function')) {
    return "@confluentinc/kafka-javascript's KafkaJS producer"
  }
  // node-rdkafka's Producer and HighLevelProducer, and their copies in
  // @confluentinc/kafka-javascript: produce() and a poll of delivery reports.
  if (typeof producer.produce === 'function' && typeof producer.setPollInterval === 'function' && typeof producer.getClient === 'function') {
    return typeof producer.setKeySerializer === 'function' ? "node-rdkafka's HighLevelProducer" : "node-rdkafka's Producer"
  }
  return null
}

module.exports = { librdkafkaClientOf }
