// Command catchup-consumer is the consumer of a replication catch-up measured end to end
// (TestReplicationCatchUpThroughput with MERIDIAN_BENCH_CONSUMER=1 and
// MERIDIAN_BENCH_CONSUMER_CMD set to this program; scripts/bench-replication.sh with CONSUMER=1):
// it consumes with pulsar-client-go, the client users run, in a process of its own, as the NATS
// peer's consumer runs in natsload.
//
// It subscribes to -topic from the earliest message, prints "catch-up consumer subscribed",
// receives -n messages, acknowledging cumulatively every 1,000 (a consumer that keeps its backlog
// small), then prints "catch-up consumer received all, unix ns: <when>" and "catch-up consumer CPU
// ns: <its CPU time since it subscribed>". Exit status 0 once it has them all.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	pulsarlog "github.com/apache/pulsar-client-go/pulsar/log"
)

func main() {
	url := flag.String("url", "", "service URL (pulsar://host:port)")
	topic := flag.String("topic", "", "topic")
	n := flag.Int("n", 0, "messages to receive")
	timeout := flag.Duration("timeout", 30*time.Minute, "give up after")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the receiving to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "catchup-consumer:", err)
			os.Exit(1)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if err := run(*url, *topic, *n, *timeout); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "catchup-consumer:", err)
		os.Exit(1)
	}
}

func run(url, topic string, n int, timeout time.Duration) error {
	if url == "" || topic == "" || n <= 0 {
		return fmt.Errorf("-url, -topic and -n are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cl, err := pulsar.NewClient(pulsar.ClientOptions{URL: url,
		Logger: pulsarlog.NewLoggerWithSlog(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))})
	if err != nil {
		return err
	}
	defer cl.Close()
	cons, err := cl.Subscribe(pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "catch-up",
		SubscriptionInitialPosition: pulsar.SubscriptionPositionEarliest})
	if err != nil {
		return err
	}
	defer cons.Close()
	cpu0 := processCPU()
	fmt.Println("catch-up consumer subscribed")
	for got := 1; got <= n; got++ {
		m, err := cons.Receive(ctx)
		if err != nil {
			return fmt.Errorf("after %d messages: %w", got-1, err)
		}
		if got%1000 == 0 || got == n {
			if err := cons.AckCumulative(m); err != nil {
				return err
			}
		}
	}
	fmt.Printf("catch-up consumer received all, unix ns: %d\n", time.Now().UnixNano())
	fmt.Printf("catch-up consumer CPU ns: %d\n", processCPU()-cpu0)
	pprof.StopCPUProfile() // the profile covers the receiving, not the closing
	return nil
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
