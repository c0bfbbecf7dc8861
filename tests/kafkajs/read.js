// Reads a topic from the beginning with KafkaJS (its own protocol code:
// Fetch parsing, aborted-transaction filtering, LZ4 through kafkajs-lz4) and
// prints one line per record, "record <partition> <offset>", then
// "end <count>". Stops after <idle_ms> without a new record or <timeout_ms>.
// Usage: node read.js <brokers> <topic> <read_committed|read_uncommitted> <idle_ms> <timeout_ms>
'use strict';
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs');
const LZ4 = require('kafkajs-lz4');

CompressionCodecs[CompressionTypes.LZ4] = new LZ4().codec;

async function main() {
  const [brokers, topic, isolation, idleMs, timeoutMs] = process.argv.slice(2);
  const kafka = new Kafka({ clientId: 'ringmirror-test', brokers: brokers.split(','), logLevel: logLevel.ERROR });
  const consumer = kafka.consumer({
    groupId: `kafkajs-reader-${process.pid}-${Date.now()}`,
    readUncommitted: isolation === 'read_uncommitted',
    maxWaitTimeInMs: 200,
  });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  const records = [];
  let last = Date.now();
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      records.push([partition, BigInt(message.offset)]);
      last = Date.now();
    },
  });
  const started = Date.now();
  while (Date.now() - last < Number(idleMs) && Date.now() - started < Number(timeoutMs)) {
    await new Promise((r) => setTimeout(r, 100));
  }
  await consumer.disconnect();
  records.sort((a, b) => a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
  for (const [p, o] of records) console.log(`record ${p} ${o}`);
  console.log(`end ${records.length}`);
}

main().catch((e) => {
  console.error(`kafkajs reader failed: ${e.stack || e}`);
  process.exit(1);
});
