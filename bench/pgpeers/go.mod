module github.com/rlcore/rl/bench/pgpeers

go 1.26.0

replace github.com/rlcore/rl => ../..

require (
	github.com/ajiwo/ratelimit v0.0.9
	github.com/ajiwo/ratelimit/backends/postgres v0.0.9
	github.com/jackc/pgx/v5 v5.12.0
	github.com/rlcore/rl v0.0.0-00010101000000-000000000000
)

require (
	github.com/golang-migrate/migrate/v4 v4.20.1 // indirect
	github.com/jackc/pgerrcode v0.0.0-20220416144525-469b46aa5efa // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
