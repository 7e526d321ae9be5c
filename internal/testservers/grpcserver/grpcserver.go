// Package grpcserver is a grpc-go server whose methods burn a known amount
// of CPU, and a client that calls them: gRPC is HTTP/2, one call a stream,
// many streams in flight on one connection, so each call must be counted
// and named by its method, not by the bursts of its connection.
//
// The service is declared by hand with a codec that passes bytes through,
// so no generated protobuf code is needed:
//
//	reqprof.test.Burn/Light     unary, burns the light cost
//	reqprof.test.Burn/Heavy     unary, burns the heavy cost
//	reqprof.test.Burn/Stream    server streaming: Messages replies per call
package grpcserver

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/reqprof/reqprof/internal/demo/calserver"
)

// Service is the service's full name; methods are "/" + Service + "/" + name.
const Service = "reqprof.test.Burn"

// Methods are the full method paths a client calls, as gRPC names them
// on the wire (HTTP/2 :path).
var Methods = struct{ Light, Heavy, Stream string }{
	Light:  "/" + Service + "/Light",
	Heavy:  "/" + Service + "/Heavy",
	Stream: "/" + Service + "/Stream",
}

// rawCodec passes messages through as bytes.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" } // the content-type a gRPC client sends by default

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("raw codec: %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

// Stats is what the server did: calls per method path.
type Stats struct {
	Calls map[string]uint64 `json:"calls"`
}

type server struct {
	light, heavy uint64 // burn iterations
	messages     int
	calls        sync.Map // method path → *atomic.Uint64
}

func (s *server) count(method string) {
	n, _ := s.calls.LoadOrStore(method, new(atomic.Uint64))
	n.(*atomic.Uint64).Add(1)
}

func (s *server) unary(method string, iterations func(*server) uint64) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: method,
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			calserver.Burn(iterations(s))
			s.count("/" + Service + "/" + method)
			out := []byte("ok")
			return &out, nil
		},
	}
}

func (s *server) desc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: Service,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			s.unary("Light", func(s *server) uint64 { return s.light }),
			s.unary("Heavy", func(s *server) uint64 { return s.heavy }),
		},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Stream",
			ServerStreams: true,
			Handler: func(srv any, stream grpc.ServerStream) error {
				var in []byte
				if err := stream.RecvMsg(&in); err != nil {
					return err
				}
				out := []byte("part")
				for range s.messages {
					calserver.Burn(s.light)
					if err := stream.SendMsg(&out); err != nil {
						return err
					}
				}
				s.count(Methods.Stream)
				return nil
			},
		}},
	}
}

// Main serves until SIGTERM, then prints Stats as one JSON line.
func Main(args []string) int {
	fs := flag.NewFlagSet("grpcserver", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address")
	light := fs.Duration("light", 50*time.Microsecond, "CPU Light burns per call")
	heavy := fs.Duration("heavy", 200*time.Microsecond, "CPU Heavy burns per call")
	messages := fs.Int("messages", 4, "replies per Stream call, each after burning --light")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	s := &server{light: calserver.IterationsFor(*light), heavy: calserver.IterationsFor(*heavy), messages: *messages}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(rawCodec{}))
	srv.RegisterService(s.desc(), nil)
	go srv.Serve(ln)
	fmt.Printf("listening on %s\n", ln.Addr())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	srv.GracefulStop()
	stats := Stats{Calls: map[string]uint64{}}
	s.calls.Range(func(k, v any) bool {
		stats.Calls[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	json.NewEncoder(os.Stdout).Encode(stats)
	return 0
}

// Dial opens a client connection to addr (its first call connects it).
func Dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
}

// Load makes calls to addr over conns new connections, each running
// inFlight calls at once, cycling through methods, and returns how many of
// each method succeeded.
func Load(ctx context.Context, addr string, conns, inFlight, calls int, methods []string) (map[string]uint64, error) {
	done := map[string]uint64{}
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range conns {
		cc, err := Dial(addr)
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		share := calls / conns
		if i < calls%conns {
			share++
		}
		wg.Go(func() {
			got, err := LoadOn(ctx, cc, inFlight, share, methods)
			mu.Lock()
			defer mu.Unlock()
			for m, n := range got {
				done[m] += n
			}
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	return done, errors.Join(errs...)
}

// LoadOn makes calls on cc, inFlight at once, cycling through methods.
func LoadOn(ctx context.Context, cc *grpc.ClientConn, inFlight, calls int, methods []string) (map[string]uint64, error) {
	var (
		mu    sync.Mutex
		done  = map[string]uint64{}
		next  atomic.Int64
		first error
		wg    sync.WaitGroup
	)
	for range inFlight {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(calls) {
					return
				}
				method := methods[int(i)%len(methods)]
				err := call(ctx, cc, method)
				mu.Lock()
				if err != nil && first == nil {
					first = fmt.Errorf("%s: %w", method, err)
				}
				if err == nil {
					done[method]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return done, first
}

func call(ctx context.Context, cc *grpc.ClientConn, method string) error {
	in := []byte("call")
	if method != Methods.Stream {
		var out []byte
		return cc.Invoke(ctx, method, &in, &out)
	}
	stream, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
	if err != nil {
		return err
	}
	if err := stream.SendMsg(&in); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	for {
		var out []byte
		if err := stream.RecvMsg(&out); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
