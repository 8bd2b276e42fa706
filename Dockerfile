# lockd: a static binary on a distroless base.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/lockd ./cmd/lockd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lockd /lockd
EXPOSE 50051 9464
ENTRYPOINT ["/lockd"]
CMD ["--listen=0.0.0.0:50051", "--http-listen=0.0.0.0:9464"]
