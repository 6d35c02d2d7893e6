# inboxd — see README.md. Every target that needs services starts them first.
SHELL := /bin/bash
GO ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.6.1
PKGS := ./...
# Tests that wait on services mostly wait: running four of a package's parallel tests at
# once (go test's default is GOMAXPROCS, 2 here) overlaps those waits. Tests that time
# themselves or read process-wide state stay serial (no t.Parallel).
TESTFLAGS := -race -count=1 -parallel 4 -timeout 20m
# Modules of their own inside the tree, which ./... stops at: the CockroachDB parser test
# (its go.mod keeps the parser's large tree out of the library's) and the bench's River
# rows (internal/riverbench: the library's go.mod does not name River). test,
# test-short and lint run each of them too.
SUBMODS := internal/sqlcheck internal/riverbench

.PHONY: all build test test-parallel test-crdb-profile test-short lint fmt services services-down browser screenshots demo verify-ingest bench bench-quick chaos fuzz up down clean

all: lint build test

build:
	$(GO) build -o bin/inboxd ./cmd/inboxd
	$(GO) -C internal/riverbench build -o ../../bin/inboxd-river .

services:
	scripts/services.sh up

services-down:
	scripts/services.sh down

# Chromium for the console's browser tests.
browser:
	scripts/services.sh browser

# The whole suite, integration tests included, against the real ActiveMQ, the private
# RabbitMQ node (the broker scenarios run on both) and PostgreSQL;
# then the CockroachDB-faithful profile (CI runs both).
test: services browser
	GO=$(GO) scripts/test.sh "$(TESTFLAGS)" "$(PKGS)" "$(SUBMODS)" "$(CRDB_PROFILE_PKGS)" "$(CRDB_PROFILE_SKIP)"

# make test with its three groups side by side: faster, under a heavier load.
test-parallel: services browser
	INBOXD_TEST_GROUPS=parallel GO=$(GO) scripts/test.sh "$(TESTFLAGS)" "$(PKGS)" "$(SUBMODS)" "$(CRDB_PROFILE_PKGS)" "$(CRDB_PROFILE_SKIP)"

# The CockroachDB-faithful profile: the processing, journal, ingest, webhook and migration tests
# again as on CockroachDB, with SERIALIZABLE as the test databases' default isolation
# (testenv.Serializable) and its 16 MiB client-message limit in front of PostgreSQL
# (testenv.LimitProxy), both at once.
CRDB_PROFILE_PKGS := ./internal/journal/ ./internal/ingest/ ./internal/process/... ./internal/webhook/... ./schema/
# Run once, in the suite: they kill and restart a private broker to test what the broker
# keeps across its restart (durable topic subscriptions, redelivery); the database side
# of them is plain ingest, which the profile's other ingest tests cover.
CRDB_PROFILE_SKIP := ^(TestTopicEventsSurviveDowntime|TestBrokerRestart)$$
test-crdb-profile: services
	INBOXD_TEST_DEFAULT_ISOLATION=serializable INBOXD_TEST_MESSAGE_LIMIT=16777216 CI=$${CI:-true} \
		$(GO) test $(TESTFLAGS) -skip '$(CRDB_PROFILE_SKIP)' $(CRDB_PROFILE_PKGS)

# The quick loop: -short skips every test that needs a service (testenv.Integration),
# whether or not the services run. make test stays the complete run.
test-short:
	$(GO) test -short -count=1 $(PKGS)
	for m in $(SUBMODS); do $(GO) -C $$m test -short -count=1 ./... || exit 1; done

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	for m in $(SUBMODS); do $(GO) -C $$m vet ./... && $(GO) -C $$m run $(STATICCHECK) ./... || exit 1; done

fmt:
	gofmt -w $$(git ls-files '*.go')

# Short runs of every fuzz target (a parser of outside input each).
fuzz:
	scripts/fuzz.sh 10s

# PNGs of the console's overview and failures pages, taken by its browser test's run.
screenshots: services browser
	INBOXD_SCREENSHOTS=$(CURDIR)/docs/console CI=$${CI:-true} $(GO) test -count=1 -run 'TestConsoleInBrowser$$' ./internal/console/

# BROKER=rabbitmq: the same demo through the private RabbitMQ node (scripts/services.sh).
BROKER ?= activemq
demo: build services
	BROKER=$(BROKER) scripts/demo.sh

# 20,000 persistent messages, 30% duplicates, 1% malformed: journal must hold exactly the unique valid ids.
verify-ingest: build services
	scripts/verify-ingest.sh

# Writes docs/benchmarks.md from the run's own Markdown (header, method, table, row notes).
bench: build services
	bin/inboxd bench -markdown docs/benchmarks.md

# Fault injection (a few minutes): two instances, its own broker and PostgreSQL cluster,
# kill -9s, a broker restart, a database crash restart and a 10 s outage; exact invariants.
chaos: services
	CI=true $(GO) test -tags chaos -count=1 -v -timeout 15m -run TestChaos ./internal/chaos/

bench-quick: build services
	bin/inboxd bench -quick

# Docker users: the whole stack (see docker-compose.yml). Its CockroachDB runs under a
# profile: one node by default, PROFILE=cluster for three. It needs INBOXD_ADMIN_TOKEN and
# INBOXD_STOMP_PASSCODE in the environment.
PROFILE ?= single
up:
	docker compose --profile $(PROFILE) up -d --build

down:
	docker compose --profile $(PROFILE) down

clean:
	rm -rf bin var
