/**
 * A TCP relay between a host and the Temporal server that can be cut like a network partition:
 * while cut, bytes in flight and new connections are held, not refused (packets dropped, the way a
 * NAT gateway that lost its flows or a pulled cable looks), so requests hang until their deadlines.
 * `heal()` drops the held connections (the peers reconnect) and relays again.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export interface Partition {
  /** `127.0.0.1:<port>`: give it to the host as its Temporal address. */
  address: string;
  /** 'drop' (default): hold everything, answer nothing; 'reset': close every connection and refuse new ones. */
  cut(mode?: 'drop' | 'reset'): void;
  heal(): void;
  close(): Promise<void>;
}

export async function startPartitionableProxy(target: string): Promise<Partition> {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  let cut = false;
  let reset = false;
  const open = new Set<Socket>();
  const track = (s: Socket) => {
    open.add(s);
    s.on('close', () => open.delete(s));
    s.on('error', () => undefined);
  };
  const server: Server = createServer((client) => {
    track(client);
    if (cut && reset) return void client.destroy();
    if (cut) return; // held: nothing relayed, nothing refused
    const upstream = connect(port, host);
    track(upstream);
    client.on('data', (b) => {
      if (!cut) upstream.write(b);
    });
    upstream.on('data', (b) => {
      if (!cut) client.write(b);
    });
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address();
  if (!addr || typeof addr === 'string') throw new Error('proxy has no port');
  return {
    address: `127.0.0.1:${addr.port}`,
    cut: (mode = 'drop') => {
      cut = true;
      reset = mode === 'reset';
      if (reset) for (const s of open) s.destroy();
    },
    heal: () => {
      cut = false;
      for (const s of open) s.destroy();
    },
    close: async () => {
      for (const s of open) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
