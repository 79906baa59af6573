import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/**
 * `server.max_connections` (0 = no limit): open connections beyond it are closed at once, before any HTTP
 * is spoken, but idle keep-alive connections give way first, as nginx reuses its idle keep-alive
 * connections when it runs out. A connection is idle once it has answered a request and until its next
 * request arrives (kept open for up to `keepAliveTimeout`, 65 s); a new connection over the limit closes the
 * connection idle the longest, and is served. Only when none is idle is the new connection closed. A
 * connection that has not sent a request yet is not idle (the headers timeout bounds it).
 *
 * Node's own `server.maxConnections` closes the new connection even when every open one is idle, so a
 * client holding many keep-alive connections it no longer uses kept every other client out for 65 s.
 *
 * @example limitConnections(server, 4096);
 */
export function limitConnections(server: Server, max: number): void {
  if (max <= 0) return;
  /** The open connections counted against `max` (an evicted one leaves at once, before its 'close'). */
  const open = new Set<Socket>();
  /** Idle keep-alive connections, the one idle the longest first (a Map keeps insertion order). */
  const idle = new Map<Socket, true>();
  /** Requests a connection has received and not finished answering (a client may pipeline several). */
  const serving = new Map<Socket, number>();
  server.on('connection', (socket: Socket) => {
    if (open.size >= max) {
      const oldest = idle.keys().next();
      if (oldest.done) {
        socket.destroy();
        return;
      }
      idle.delete(oldest.value);
      open.delete(oldest.value);
      oldest.value.destroy();
    }
    open.add(socket);
    socket.once('close', () => {
      open.delete(socket);
      idle.delete(socket);
      serving.delete(socket);
    });
  });
  server.on('request', (req, res) => {
    const socket = req.socket;
    idle.delete(socket);
    serving.set(socket, (serving.get(socket) ?? 0) + 1);
    res.once('close', () => {
      const left = (serving.get(socket) ?? 1) - 1;
      if (left > 0) return void serving.set(socket, left);
      serving.delete(socket);
      if (!socket.destroyed && open.has(socket)) idle.set(socket, true);
    });
  });
}
