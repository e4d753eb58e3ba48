// Sarama (github.com/IBM/sarama), a Go client, configured as an old Kafka client for
// tests/test_serve_sarama.py: what Kafka 4 turns away (KIP-896), through
// `kafkacodec serve --upstream --produce`.
//
//	sarama produce   BOOTSTRAP TOPIC VERSION COUNT CODEC   SyncProducer, partition 0, acks all
//	sarama partition BOOTSTRAP TOPIC VERSION COUNT GROUP   partition 0 from the group's offset
//	                                                       (oldest without one), committed with
//	                                                       the offset manager
//	sarama group     BOOTSTRAP TOPIC VERSION COUNT GROUP   a consumer group, offsets committed
//
// Record i: key "key-i" (none when i % 9 == 4), value "value i " repeated 1 + i % 5 times.
// stdout: "sent COUNT", or one "OFFSET KEY VALUE" line per record read (hex, "-" for none) and
// "committed"; exit 1 with the client's error on stderr, 2 when COUNT records did not come in
// 60 seconds.
package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, "failed:", err)
	os.Exit(1)
}

func text(data []byte) string {
	if data == nil {
		return "-"
	}
	return hex.EncodeToString(data)
}

func record(i int) (sarama.Encoder, sarama.Encoder) {
	value := strings.Repeat(fmt.Sprintf("value %d ", i), 1+i%5)
	if i%9 == 4 {
		return nil, sarama.StringEncoder(value)
	}
	return sarama.StringEncoder(fmt.Sprintf("key-%d", i)), sarama.StringEncoder(value)
}

var codecs = map[string]sarama.CompressionCodec{
	"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
	"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4,
}

type handler struct {
	want, got int
	done      context.CancelFunc
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for msg := range c.Messages() {
		fmt.Println(msg.Offset, text(msg.Key), text(msg.Value))
		s.MarkMessage(msg, "")
		h.got++
		if h.got >= h.want {
			s.Commit()
			h.done()
			return nil
		}
	}
	return nil
}

func main() {
	if os.Getenv("SARAMA_LOG") != "" {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	}
	mode, bootstrap, topic := os.Args[1], []string{os.Args[2]}, os.Args[3]
	version, err := sarama.ParseKafkaVersion(os.Args[4])
	if err != nil {
		fail(err)
	}
	count, _ := strconv.Atoi(os.Args[5])
	cfg := sarama.NewConfig()
	cfg.Version = version
	cfg.ClientID = "sarama-" + os.Args[4]
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	switch mode {
	case "produce":
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Partitioner = sarama.NewManualPartitioner
		cfg.Producer.Compression = codecs[os.Args[6]]
		cfg.Net.MaxOpenRequests = 1
		producer, err := sarama.NewSyncProducer(bootstrap, cfg)
		if err != nil {
			fail(err)
		}
		for i := 0; i < count; i++ {
			key, value := record(i)
			msg := &sarama.ProducerMessage{Topic: topic, Partition: 0, Key: key, Value: value}
			if _, _, err := producer.SendMessage(msg); err != nil {
				fail(err)
			}
		}
		if err := producer.Close(); err != nil {
			fail(err)
		}
		fmt.Println("sent", count)
	case "partition":
		client, err := sarama.NewClient(bootstrap, cfg)
		if err != nil {
			fail(err)
		}
		offsets, err := sarama.NewOffsetManagerFromClient(os.Args[6], client)
		if err != nil {
			fail(err)
		}
		managed, err := offsets.ManagePartition(topic, 0)
		if err != nil {
			fail(err)
		}
		next, _ := managed.NextOffset()
		consumer, err := sarama.NewConsumerFromClient(client)
		if err != nil {
			fail(err)
		}
		partition, err := consumer.ConsumePartition(topic, 0, next)
		if err != nil {
			fail(err)
		}
		deadline := time.After(60 * time.Second)
		for got := 0; got < count; got++ {
			select {
			case msg := <-partition.Messages():
				fmt.Println(msg.Offset, text(msg.Key), text(msg.Value))
				managed.MarkOffset(msg.Offset+1, "")
			case err := <-partition.Errors():
				fail(err)
			case <-deadline:
				os.Exit(2)
			}
		}
		partition.Close()
		// without auto-commit, Commit() flushes the marks and releases the closing manager
		managed.AsyncClose()
		offsets.Commit()
		if err := offsets.Close(); err != nil {
			fail(err)
		}
		fmt.Println("committed")
		client.Close()
	case "group":
		group, err := sarama.NewConsumerGroup(bootstrap, os.Args[6], cfg)
		if err != nil {
			fail(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		h := &handler{want: count, done: cancel}
		for ctx.Err() == nil && h.got < count {
			if err := group.Consume(ctx, []string{topic}, h); err != nil {
				fail(err)
			}
		}
		if err := group.Close(); err != nil {
			fail(err)
		}
		if h.got < count {
			os.Exit(2)
		}
		fmt.Println("committed")
	}
}
