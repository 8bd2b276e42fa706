# lockd: a static binary on a distroless base.
FROM golang:1.26 AS build
WORKDIR /src
# lockd's module, and the client and message modules it replaces with ./client
# and ./gen.
COPY go.mod go.sum ./
COPY client/go.mod client/go.sum client/
COPY gen/go.mod gen/go.sum gen/
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/lockd ./cmd/lockd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lockd /lockd
EXPOSE 50051 9464
ENTRYPOINT ["/lockd"]
CMD ["--listen=0.0.0.0:50051", "--http-listen=0.0.0.0:9464"]
