'use strict'

// `node examples/kafka.js`: one send() per "request", as services write it,
// batched by wrapProducer(). With KAFKA_BROKERS unset it starts the project's
// local test broker: Kafka 3.9, run with your Java 17. Its FIRST RUN
// DOWNLOADS THE BROKER (Kafka's jars, tens of MB, from Maven Central, with
// your Maven) into .cache/, printing progress; later runs start in seconds.
// With KAFKA_BROKERS=host:port,... it uses yours and downloads nothing.
//
// Needs kafkajs, io-hygiene's optional peer dependency: npm install kafkajs
// io-hygiene first: install() corrects kafkajs's producer (its retry when
// leaders move, its grouping) as kafkajs loads, so it must come before the
// first require('kafkajs'); `node -r io-hygiene/register` does the same.
const { install, wrapProducer } = require('io-hygiene')
install()
const { Kafka, logLevel } = require('kafkajs')

async function main () {
  let broker = null
  let brokers = process.env.KAFKA_BROKERS?.split(',')
  if (!brokers) {
    const { startKafka } = require('../test/helpers/kafka-broker')
    console.log('starting a local broker (the first run downloads Kafka from Maven Central: needs Java 17 and Maven)...')
    broker = await startKafka({ log: (line) => console.log(line) })
    brokers = broker.brokers
  }
  try {
    // logLevel NOTHING: kafkajs logs the retries of a just-started broker as errors.
    const kafka = new Kafka({ clientId: 'example', brokers, logLevel: logLevel.NOTHING, retry: { maxRetryTime: 2000 } })
    const producer = wrapProducer(kafka.producer({ idempotent: true }))
    await producer.connect()

    let requests = 0
    producer.on(producer.events.REQUEST, ({ payload }) => { if (payload.apiName === 'Produce') requests++ })

    // 5,000 concurrent "requests", each producing its own message and
    // awaiting its acknowledgement.
    const started = Date.now()
    await Promise.all(Array.from({ length: 5000 }, (_, i) =>
      producer.send({ topic: 'example-events', messages: [{ key: `user-${i % 50}`, value: JSON.stringify({ i }) }] })
    ))
    console.log(`5,000 send() calls acknowledged in ${Date.now() - started} ms with ${requests} Produce requests`)
    console.log(producer.stats())
    await producer.disconnect() // flushes first
  } finally {
    await broker?.close()
  }
}

main()
