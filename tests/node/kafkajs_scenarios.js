// KafkaJS against a Strom broker, one scenario a run, driven by
// tests/integration/test_node_clients.py:
//
//   node kafkajs_scenarios.js SCENARIO BOOTSTRAP TOPIC_PREFIX
//
// Each scenario prints what it saw as JSON lines on stdout ({"event": ..., ...}); the
// Python test asserts on them and on what confluent-kafka reads back. A scenario that
// fails prints {"event": "error", ...} and exits with code 1.
"use strict";

const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require("kafkajs");
const SnappyCodec = require("kafkajs-snappy");

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec;

const [scenario, bootstrap, prefix] = process.argv.slice(2);

const kafka = new Kafka({
  clientId: "strom-node-test",
  brokers: [bootstrap],
  logLevel: logLevel.ERROR,
  // KafkaJS logs to stdout, which is the scenarios' output: its lines go to stderr
  logCreator: () => (entry) => process.stderr.write(JSON.stringify(entry.log) + "\n"),
  retry: { retries: 8, initialRetryTime: 100 },
});

function emit(event, fields) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");
}

async function admin() {
  const client = kafka.admin();
  await client.connect();
  const created = await client.createTopics({
    waitForLeaders: true,
    topics: [
      {
        topic: `${prefix}-admin`,
        numPartitions: 3,
        configEntries: [{ name: "retention.ms", value: "3600000" }],
      },
    ],
  });
  emit("created", { created });
  const again = await client.createTopics({ topics: [{ topic: `${prefix}-admin` }] });
  emit("created-again", { created: again });
  const { topics } = await client.fetchTopicMetadata({ topics: [`${prefix}-admin`] });
  emit("metadata", {
    topics: topics.map((t) => ({
      name: t.name,
      partitions: t.partitions
        .map((p) => ({ partition: p.partitionId, leader: p.leader, replicas: p.replicas }))
        .sort((a, b) => a.partition - b.partition),
    })),
  });
  emit("topics", { topics: (await client.listTopics()).sort() });
  const cluster = await client.describeCluster();
  emit("cluster", {
    brokers: cluster.brokers.map((b) => ({ nodeId: b.nodeId, host: b.host, port: b.port })),
    controller: cluster.controller,
    clusterId: cluster.clusterId,
  });
  const described = await client.describeConfigs({
    includeSynonyms: false,
    resources: [{ type: 2 /* TOPIC */, name: `${prefix}-admin` }],
  });
  const entries = {};
  for (const entry of described.resources[0].configEntries) {
    entries[entry.configName] = entry.configValue;
  }
  emit("configs", { errorCode: described.resources[0].errorCode, entries });
  await client.alterConfigs({
    validateOnly: false,
    resources: [
      {
        type: 2,
        name: `${prefix}-admin`,
        configEntries: [{ name: "retention.ms", value: "7200000" }],
      },
    ],
  });
  await client.createPartitions({ topicPartitions: [{ topic: `${prefix}-admin`, count: 4 }] });
  const grown = await client.fetchTopicMetadata({ topics: [`${prefix}-admin`] });
  emit("partitions", { count: grown.topics[0].partitions.length });
  await client.deleteTopics({ topics: [`${prefix}-admin`] });
  emit("deleted", { topics: (await client.listTopics()).filter((t) => t.startsWith(prefix)) });
  await client.disconnect();
}

async function produce() {
  const client = kafka.admin();
  await client.connect();
  await client.createTopics({
    waitForLeaders: true,
    topics: [{ topic: `${prefix}-produced`, numPartitions: 2 }],
  });
  await client.disconnect();
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const codecs = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP, snappy: CompressionTypes.Snappy };
  for (const [name, compression] of Object.entries(codecs)) {
    const messages = [];
    for (let i = 0; i < 50; i++) {
      messages.push({
        key: `${name}-${i % 5}`,
        value: `${name} record ${i} ` + "x".repeat(i),
        partition: i % 2,
        headers: { codec: name, index: String(i) },
      });
    }
    const results = await producer.send({ topic: `${prefix}-produced`, acks: -1, compression, messages });
    emit("sent", {
      codec: name,
      results: results.map((r) => ({ partition: r.partition, errorCode: r.errorCode, baseOffset: r.baseOffset })),
    });
  }
  await producer.disconnect();
}

async function group() {
  const topic = `${prefix}-grouped`;
  const total = Number(process.argv[5]);
  const groupId = `${prefix}-group`;
  const seen = new Map();
  const members = [];
  let resolveAll;
  const allSeen = new Promise((resolve) => (resolveAll = resolve));
  for (const name of ["a", "b"]) {
    const consumer = kafka.consumer({
      groupId,
      sessionTimeout: 10000,
      heartbeatInterval: 500,
      rebalanceTimeout: 10000,
      maxWaitTimeInMs: 200, // a fetch that waits long delays the disconnect as long
    });
    consumer.on(consumer.events.GROUP_JOIN, (e) => {
      emit("joined", { member: name, assignment: e.payload.memberAssignment });
    });
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    members.push({ name, consumer });
  }
  // both members join before either consumes: the group's one rebalance gives each a share
  await Promise.all(
    members.map(({ name, consumer }) =>
      consumer.run({
        autoCommit: true,
        autoCommitInterval: 200,
        eachMessage: async ({ partition, message }) => {
          const value = message.value.toString();
          seen.set(value, (seen.get(value) || 0) + 1);
          emit("record", { member: name, partition, offset: message.offset, value });
          if ([...seen.values()].reduce((a, b) => a + b, 0) >= total) resolveAll();
        },
      }),
    ),
  );
  await allSeen;
  // disconnect commits what was consumed and leaves the group
  for (const { consumer } of members) await consumer.disconnect();
  const client = kafka.admin();
  await client.connect();
  const offsets = await client.fetchOffsets({ groupId, topics: [topic] });
  emit("committed", {
    partitions: offsets[0].partitions.map((p) => ({ partition: p.partition, offset: p.offset })),
  });
  const described = await client.describeGroups([groupId]);
  emit("group", { state: described.groups[0].state, protocol: described.groups[0].protocolType });
  await client.disconnect();
}

async function transaction() {
  const topic = `${prefix}-txn`;
  const client = kafka.admin();
  await client.connect();
  await client.createTopics({ waitForLeaders: true, topics: [{ topic, numPartitions: 2 }] });
  await client.disconnect();
  const producer = kafka.producer({
    transactionalId: `${prefix}-txn-id`,
    idempotent: true,
    maxInFlightRequests: 1,
  });
  await producer.connect();
  const committed = await producer.transaction();
  await committed.send({
    topic,
    messages: [0, 1, 2, 3].map((i) => ({ value: `committed ${i}`, partition: i % 2 })),
  });
  await committed.commit();
  emit("committed", {});
  const aborted = await producer.transaction();
  await aborted.send({
    topic,
    messages: [0, 1].map((i) => ({ value: `aborted ${i}`, partition: i % 2 })),
  });
  await aborted.abort();
  emit("aborted", {});
  // consume-transform-produce: the input's offsets committed in the transaction
  const withOffsets = await producer.transaction();
  await withOffsets.send({ topic, messages: [{ value: "with offsets", partition: 0 }] });
  await withOffsets.sendOffsets({
    consumerGroupId: `${prefix}-txn-group`,
    topics: [{ topic, partitions: [{ partition: 1, offset: "2" }] }],
  });
  await withOffsets.commit();
  emit("committed-with-offsets", {});
  await producer.disconnect();
  // an idempotent producer outside a transaction
  const idempotent = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await idempotent.connect();
  const results = await idempotent.send({
    topic,
    acks: -1,
    messages: [{ value: "idempotent", partition: 1 }],
  });
  emit("idempotent", { baseOffset: results[0].baseOffset, errorCode: results[0].errorCode });
  await idempotent.disconnect();
}

const scenarios = { admin, produce, group, transaction };

(async () => {
  if (!scenarios[scenario]) throw new Error(`no scenario ${scenario}`);
  await scenarios[scenario]();
})().then(
  () => process.exit(0),
  (error) => {
    emit("error", { name: error.name, message: error.message, type: error.type || null });
    process.exit(1);
  },
);
