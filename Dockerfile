# x402d: one binary for every role (serve, api, worker, migrate, devchain).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/x402d ./cmd/x402d

FROM debian:bookworm-slim
# Chromium renders pages whose metadata needs JavaScript (url-meta).
RUN apt-get update && apt-get install -y --no-install-recommends chromium ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/x402d /usr/local/bin/x402d
USER nobody
ENTRYPOINT ["x402d"]
CMD ["serve"]
