// Sarama 1.22 (Debian's golang-github-shopify-sarama-dev) against a broker: create a
// topic, ListTopics and DescribeConfig through its ClusterAdmin, an idempotent
// producer, and a consumer group that commits with Sarama's default offset settings
// (OffsetCommit v1). Prints one JSON object of what it saw; exits 1 on any error.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/Shopify/sarama"
)

type handler struct {
	want     int
	mu       sync.Mutex
	seen     map[string]bool
	finished chan struct{}
	once     sync.Once
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for msg := range c.Messages() {
		s.MarkMessage(msg, "")
		h.mu.Lock()
		h.seen[string(msg.Value)] = true
		if len(h.seen) >= h.want {
			h.once.Do(func() { close(h.finished) })
		}
		h.mu.Unlock()
	}
	return nil
}

func fail(step string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", step, err)
	os.Exit(1)
}

func main() {
	broker, topic, group := os.Args[1], os.Args[2], os.Args[3]
	const count = 30
	config := sarama.NewConfig()
	config.Version = sarama.V0_11_0_0 // idempotence needs 0.11; offsets keep their defaults
	config.Producer.Idempotent = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Producer.Return.Successes = true
	config.Net.MaxOpenRequests = 1
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	result := map[string]interface{}{}

	admin, err := sarama.NewClusterAdmin([]string{broker}, config)
	if err != nil {
		fail("admin", err)
	}
	if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false); err != nil {
		fail("create topic", err)
	}
	topics, err := admin.ListTopics()
	if err != nil {
		fail("list topics", err)
	}
	if detail, ok := topics[topic]; ok {
		result["partitions"] = detail.NumPartitions
	}
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	if err != nil {
		fail("describe config", err)
	}
	configs := map[string]string{}
	for _, entry := range entries {
		configs[entry.Name] = entry.Value
	}
	result["cleanup.policy"] = configs["cleanup.policy"]

	producer, err := sarama.NewSyncProducer([]string{broker}, config)
	if err != nil {
		fail("producer", err)
	}
	offsets := map[int32]int64{}
	for i := 0; i < count; i++ {
		partition, offset, err := producer.SendMessage(&sarama.ProducerMessage{
			Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("k%d", i)),
			Value: sarama.StringEncoder(fmt.Sprintf("v%d", i)),
		})
		if err != nil {
			fail("produce", err)
		}
		if offset+1 > offsets[partition] {
			offsets[partition] = offset + 1
		}
	}
	producer.Close()
	result["produced"] = offsets

	consumerGroup, err := sarama.NewConsumerGroup([]string{broker}, group, config)
	if err != nil {
		fail("consumer group", err)
	}
	h := &handler{want: count, seen: map[string]bool{}, finished: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	go func() {
		for ctx.Err() == nil {
			if err := consumerGroup.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "consume: %v\n", err)
				time.Sleep(time.Second)
			}
		}
	}()
	select {
	case <-h.finished:
	case <-ctx.Done():
		fail("consume", fmt.Errorf("saw %d of %d records", len(h.seen), count))
	}
	cancel()
	if err := consumerGroup.Close(); err != nil { // commits what was marked
		fail("close group", err)
	}
	result["consumed"] = len(h.seen)

	committed, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2}})
	if err != nil {
		fail("list offsets", err)
	}
	fetched := map[int32]int64{}
	for partition, block := range committed.Blocks[topic] {
		fetched[partition] = block.Offset
	}
	result["committed"] = fetched
	admin.Close()
	out, _ := json.Marshal(result)
	fmt.Println(string(out))
}
