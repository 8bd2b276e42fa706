module github.com/lockd/lockd/examples/wechat-go

go 1.26.8

require (
	github.com/lockd/lockd/client v0.0.0-00010101000000-000000000000
	github.com/silenceper/wechat/v2 v2.1.10
)

require (
	github.com/bradfitz/gomemcache v0.0.0-20220106215444-fb4bf637b56d // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/fatih/structs v1.1.0 // indirect
	github.com/go-redis/redis/v8 v8.11.5 // indirect
	github.com/lockd/lockd/gen v0.0.0-00010101000000-000000000000 // indirect
	github.com/sirupsen/logrus v1.9.0 // indirect
	github.com/spf13/cast v1.4.1 // indirect
	github.com/tidwall/gjson v1.14.1 // indirect
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.0 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// Inside lockd's repository the example builds against the client next to
// it (see docs/clients-go.md).
replace (
	github.com/lockd/lockd/client => ../../client
	github.com/lockd/lockd/gen => ../../gen
)
