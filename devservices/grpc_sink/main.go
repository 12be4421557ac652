// grpc-sink: a gRPC server that answers every unary call on any method at once, for the
// dispatcher benchmark (uForwarder's consumer contract: request = raw bytes, response =
// google.protobuf.Empty, i.e. zero bytes). It must never be the bottleneck, so it does nothing
// but count.
//
//	grpc-sink -addr 127.0.0.1:50051 -stats-addr 127.0.0.1:50052 [-fail-every 20]
//
// -fail-every N answers every Nth call with RESOURCE_EXHAUSTED (N=20: 5% of calls), which a
// dispatcher routes to its retry tier. GET /stats on -stats-addr returns JSON: calls, failed,
// bytes, and the first and last receive times in Unix nanoseconds.
//
//	grpc-sink -load -target 127.0.0.1:50051 -method /kafka.consumerproxy.g/t -n 500000 -c 64
//
// -load is the other end: a lean load generator (raw bytes, no message reflection) that makes
// -n unary calls with -size-byte requests, -c in flight over -connections connections, and
// prints JSON: calls, errors, seconds, calls_per_s, latency p50/p99 in ms.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
)

// rawCodec passes message bytes through unchanged: requests are Kafka values, not protobufs.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = data
	return nil
}
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

type stats struct {
	calls, failed, bytes atomic.Int64
	first, last          atomic.Int64
	once                 sync.Once
}

func (s *stats) snapshot() map[string]int64 {
	return map[string]int64{
		"calls": s.calls.Load(), "failed": s.failed.Load(), "bytes": s.bytes.Load(),
		"first_ns": s.first.Load(), "last_ns": s.last.Load(),
	}
}

func load(target, method string, n, concurrency, connections, size int) {
	conns := make([]*grpc.ClientConn, connections)
	for i := range conns {
		conn, err := grpc.NewClient(target,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
		if err != nil {
			log.Fatalf("dial %s: %v", target, err)
		}
		defer conn.Close()
		conns[i] = conn
	}
	payload := make([]byte, size)
	var next, errs atomic.Int64
	latencies := make([][]float64, concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			conn := conns[w%connections]
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				var reply []byte
				err := conn.Invoke(context.Background(), method, &payload, &reply)
				latencies[w] = append(latencies[w], float64(time.Since(t0).Microseconds())/1000)
				if err != nil {
					errs.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	seconds := time.Since(start).Seconds()
	var all []float64
	for _, l := range latencies {
		all = append(all, l...)
	}
	sort.Float64s(all)
	out, _ := json.Marshal(map[string]any{
		"calls": len(all), "errors": errs.Load(), "seconds": seconds,
		"calls_per_s":    float64(len(all)) / seconds,
		"latency_p50_ms": all[len(all)/2], "latency_p99_ms": all[len(all)*99/100],
	})
	os.Stdout.Write(append(out, '\n'))
}

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "gRPC listen address")
	statsAddr := flag.String("stats-addr", "", "HTTP address of GET /stats (empty: none)")
	failEvery := flag.Int64("fail-every", 0, "answer every Nth call RESOURCE_EXHAUSTED (0: never)")
	loadMode := flag.Bool("load", false, "generate load against -target instead of serving")
	target := flag.String("target", "127.0.0.1:50051", "-load: the server to call")
	method := flag.String("method", "/kafka.consumerproxy.bench/bench", "-load: the full method")
	n := flag.Int("n", 100000, "-load: calls to make")
	concurrency := flag.Int("c", 64, "-load: calls in flight")
	connections := flag.Int("connections", 2, "-load: HTTP/2 connections")
	size := flag.Int("size", 150, "-load: request bytes")
	flag.Parse()
	if *loadMode {
		load(*target, *method, *n, *concurrency, *connections, *size)
		return
	}

	st := &stats{}
	handler := func(_ any, stream grpc.ServerStream) error {
		var req []byte
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		now := time.Now().UnixNano()
		st.once.Do(func() { st.first.Store(now) })
		st.last.Store(now)
		n := st.calls.Add(1)
		st.bytes.Add(int64(len(req)))
		if *failEvery > 0 && n%*failEvery == 0 {
			st.failed.Add(1)
			return status.Error(codes.ResourceExhausted, "sink: scripted retriable failure")
		}
		empty := []byte{}
		return stream.SendMsg(&empty)
	}
	server := grpc.NewServer(
		grpc.ForceServerCodec(rawCodec{}),
		grpc.UnknownServiceHandler(handler),
		grpc.MaxConcurrentStreams(1<<16),
	)
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("listen %s: %v", *addr, err)
	}
	if *statsAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(st.snapshot())
		})
		mux.HandleFunc("/reset", func(w http.ResponseWriter, _ *http.Request) {
			st.calls.Store(0)
			st.failed.Store(0)
			st.bytes.Store(0)
			st.first.Store(0)
			st.last.Store(0)
			st.once = sync.Once{}
			w.WriteHeader(http.StatusNoContent)
		})
		statsLis, err := net.Listen("tcp", *statsAddr)
		if err != nil {
			log.Fatalf("listen %s: %v", *statsAddr, err)
		}
		go func() { _ = http.Serve(statsLis, mux) }()
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Stop()
	}()
	log.Printf("grpc-sink serving on %s (fail-every %d)", lis.Addr(), *failEvery)
	if err := server.Serve(lis); err != nil {
		log.Fatalf("serve: %v", err)
	}
	out, _ := json.Marshal(st.snapshot())
	log.Printf("grpc-sink stopped: %s", out)
}
