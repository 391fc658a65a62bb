# A TCP relay that holds every chunk for a fixed time in each direction, in order: the latency
# of a slow link where this kernel has no netem. Used by bench/slowlink.sh and SlowLinkTests.
#   python3 bench/delay-relay.py LISTEN_HOST LISTEN_PORT TARGET_PORT HALF_RTT_SECONDS
# Connects each client to 127.0.0.1:TARGET_PORT.
import asyncio, sys

listen_host, listen, target, half = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])

async def pipe(reader, writer):
    queue = asyncio.Queue()
    loop = asyncio.get_running_loop()
    async def pump():
        while True:
            due, data = await queue.get()
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            if data is None:
                writer.close()
                return
            writer.write(data)
            await writer.drain()
    task = asyncio.create_task(pump())
    try:
        while data := await reader.read(65536):
            queue.put_nowait((loop.time() + half, data))
    except ConnectionError:
        pass
    queue.put_nowait((loop.time() + half, None))
    await task

async def serve(client_reader, client_writer):
    try:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target)
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer), return_exceptions=True)

async def main():
    server = await asyncio.start_server(serve, listen_host, listen)
    await server.serve_forever()

asyncio.run(main())
