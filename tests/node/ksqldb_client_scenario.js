// ksqldb-client (HTTP/2 with prior knowledge, as ksqlDB's own clients speak) against a
// Strom ksql server, driven by tests/integration/test_node_clients.py:
//
//   node ksqldb_client_scenario.js PORT BOOTSTRAP NAME_PREFIX
//
// Prints what it saw as JSON lines on stdout ({"event": ..., ...}); a failure prints
// {"event": "error", ...} and exits with code 1.
"use strict";

const http2 = require("http2");
const { Kafka, logLevel } = require("kafkajs");
const KsqldbClient = require("ksqldb-client");

const [port, bootstrap, prefix] = process.argv.slice(2);
const stream = `${prefix}_ORDERS`;
const table = `${prefix}_PRICES`;

function emit(event, fields) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");
}

async function until(what, check) {
  const deadline = Date.now() + 60000;
  for (;;) {
    const found = await check();
    if (found) return found;
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function pushQueryIds(client) {
  const queries = await client.listQueries();
  return queries.filter((q) => q.queryType === "PUSH").map((q) => q.id);
}

// A push query over the client's own HTTP/2 connection, reset (RST_STREAM CANCEL) as soon
// as its header arrives: what the server does with a query whose client left.
function pushQueryThenReset() {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", reject);
    const request = session.request({
      ":method": "POST",
      ":path": "/query-stream",
      "content-type": "application/json",
    });
    request.setEncoding("utf8");
    request.on("error", () => {}); // the reset is ours
    request.once("data", (chunk) => {
      const header = JSON.parse(chunk);
      request.close(http2.constants.NGHTTP2_CANCEL, () => {
        session.close();
        resolve(header.queryId);
      });
    });
    request.end(JSON.stringify({ sql: `SELECT * FROM ${stream} EMIT CHANGES;` }));
  });
}

// /inserts-stream as ksqlDB's Java client uses it: one HTTP/2 stream, each row written
// only once the previous one's acknowledgement came back on the same stream
function insertsOneByOne(rows) {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.on("error", reject);
    const request = session.request({
      ":method": "POST",
      ":path": "/inserts-stream",
      "content-type": "application/vnd.ksqlapi.delimited.v1",
    });
    request.setEncoding("utf8");
    request.on("error", reject);
    const acks = [];
    let pending = "";
    request.on("data", (chunk) => {
      pending += chunk;
      let newline;
      while ((newline = pending.indexOf("\n")) >= 0) {
        acks.push(JSON.parse(pending.slice(0, newline)));
        pending = pending.slice(newline + 1);
        if (acks.length < rows.length) request.write(JSON.stringify(rows[acks.length]) + "\n");
        else request.end();
      }
    });
    request.on("end", () => {
      session.close();
      resolve(acks);
    });
    request.write(JSON.stringify({ target: stream }) + "\n");
    request.write(JSON.stringify(rows[0]) + "\n");
  });
}

async function main() {
  const client = new KsqldbClient({ host: "http://127.0.0.1", port: Number(port) });
  await client.connect();
  emit("connected", {});

  const created = await client.executeStatement(
    `CREATE STREAM ${stream} (id INT KEY, item STRING, qty INT) ` +
      `WITH (kafka_topic='${prefix.toLowerCase()}_orders', value_format='JSON', partitions=1);`,
  );
  emit("created", { status: created.status, rows: created.data && created.data.rows });
  const refused = await client.executeStatement("CREATE STREAM nope WITH (kafka_topic=1);");
  emit("refused", { status: refused.status, error: refused.error });
  emit("streams", { streams: await client.listStreams() });

  for (const [id, item, qty] of [[1, "apple", 3], [2, "pear", 5]]) {
    const inserted = await client.insertInto(stream, { ID: id, ITEM: item, QTY: qty });
    emit("inserted", { status: inserted.status, rows: inserted.data && inserted.data.rows });
  }

  // a push query from the beginning: the two rows there, then one inserted while it runs
  const rows = [];
  let queryId = null;
  let resolveRows;
  const threeRows = new Promise((resolve) => (resolveRows = resolve));
  const pushed = client.streamQuery(
    `SELECT id, item, qty * 10 AS tenfold FROM ${stream} EMIT CHANGES;`,
    ({ metadata, rows: arrived }) => {
      queryId = metadata.queryId;
      for (const row of arrived || []) {
        rows.push(row);
        emit("row", { row });
        if (rows.length === 2) {
          client.insertInto(stream, { ID: 3, ITEM: "plum", QTY: 7 });
        }
        if (rows.length === 3) resolveRows();
      }
    },
    { properties: { "auto.offset.reset": "earliest" } },
  );
  await threeRows;
  emit("running", { queryIds: await pushQueryIds(client), queryId });
  const terminated = await client.terminatePushQuery(queryId);
  emit("terminated", { status: terminated.status, rows: terminated.data && terminated.data.rows });
  const ended = await pushed;
  emit("push-ended", { status: ended.status, metadata: ended.data.metadata });
  emit("after-terminate", { queryIds: await pushQueryIds(client) });

  // a push query whose HTTP/2 stream the client resets
  const resetId = await pushQueryThenReset();
  emit("reset", { queryId: resetId });
  await until("the reset query to end", async () => !(await pushQueryIds(client)).includes(resetId));
  emit("after-reset", { queryIds: await pushQueryIds(client) });

  // a pull query on a source table, by key
  const tableCreated = await client.executeStatement(
    `CREATE SOURCE TABLE ${table} (item STRING PRIMARY KEY, price INT) ` +
      `WITH (kafka_topic='${prefix.toLowerCase()}_prices', value_format='JSON', partitions=1);`,
  );
  emit("table", { status: tableCreated.status });
  // a source table is read-only to INSERT: its rows are produced to its topic
  const producer = new Kafka({ brokers: [bootstrap], logLevel: logLevel.NOTHING }).producer();
  await producer.connect();
  await producer.send({
    topic: `${prefix.toLowerCase()}_prices`,
    messages: [
      { key: "apple", value: JSON.stringify({ PRICE: 4 }) },
      { key: "pear", value: JSON.stringify({ PRICE: 6 }) },
    ],
  });
  await producer.disconnect();
  const pulled = await until("the pull query's row", async () => {
    const answer = await client.query(`SELECT * FROM ${table} WHERE item = 'pear';`);
    if (answer.error) throw new Error(JSON.stringify(answer.error));
    return answer.data.rows.length ? answer : null;
  });
  emit("pulled", { status: pulled.status, metadata: pulled.data.metadata, rows: pulled.data.rows });

  const acks = await insertsOneByOne([
    { ID: 4, ITEM: "fig", QTY: 1 },
    { ID: 5, ITEM: "kiwi", QTY: 2 },
  ]);
  emit("inserts-stream", { acks });

  await client.disconnect();
  emit("disconnected", {});
}

main().then(
  () => process.exit(0),
  (error) => {
    emit("error", { name: error.name, message: error.message });
    process.exit(1);
  },
);
