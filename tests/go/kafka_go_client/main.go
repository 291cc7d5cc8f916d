// kafka-go 0.2.1 (Debian's golang-github-segmentio-kafka-go-dev) against a broker:
// create a topic (CreateTopics v0), write with its Writer (Produce v2, message sets of
// magic 1), read with a partition Reader (Fetch v2) and with a group Reader that
// commits. Prints one JSON object of what it saw; exits 1 on any error.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

func fail(step string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", step, err)
	os.Exit(1)
}

func read(reader *kafka.Reader, count int, commit bool) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var values []string
	for len(values) < count {
		message, err := reader.FetchMessage(ctx)
		if err != nil {
			fail("read", err)
		}
		values = append(values, fmt.Sprintf("%d:%s=%s", message.Offset, message.Key, message.Value))
		if commit {
			if err := reader.CommitMessages(ctx, message); err != nil {
				fail("commit", err)
			}
		}
	}
	return values
}

func main() {
	broker, topic, group := os.Args[1], os.Args[2], os.Args[3]
	const count = 20
	conn, err := kafka.Dial("tcp", broker)
	if err != nil {
		fail("dial", err)
	}
	err = conn.CreateTopics(kafka.TopicConfig{Topic: topic, NumPartitions: 1, ReplicationFactor: 1})
	if err != nil {
		fail("create topic", err)
	}
	conn.Close()

	writer := kafka.NewWriter(kafka.WriterConfig{Brokers: []string{broker}, Topic: topic, BatchSize: 5})
	var messages []kafka.Message
	for i := 0; i < count; i++ {
		messages = append(messages, kafka.Message{
			Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i)),
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	if err := writer.WriteMessages(ctx, messages...); err != nil {
		fail("write", err)
	}
	cancel()
	writer.Close()

	partitionReader := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{broker}, Topic: topic, Partition: 0, MaxWait: 500 * time.Millisecond,
	})
	byPartition := read(partitionReader, count, false)
	partitionReader.Close()

	groupReader := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{broker}, Topic: topic, GroupID: group, MaxWait: 500 * time.Millisecond,
	})
	byGroup := read(groupReader, count, true)
	groupReader.Close()

	out, _ := json.Marshal(map[string]interface{}{"partition": byPartition, "group": byGroup})
	fmt.Println(string(out))
}
