"""The network layer every networked part uses: one event loop (`loop`), one connection for the
client and the server side (`connection`: frames, deadlines, KIP-72/81 memory muting) over one
transport (`transport`: plain or TLS), the pieces a message is written from (`pieces`)."""
