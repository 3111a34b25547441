import type { AddressInfo } from 'node:net';
import dns2 from 'dns2';

const { Packet } = dns2;
const SERVFAIL = 2;
const NXDOMAIN = 3;

/** What the server answers for one name: TXT values, a server failure, or nothing at all (the client times out). */
export type DnsAnswer = string[] | 'servfail' | 'silence';

/**
 * A real DNS server (dns2, UDP) on loopback, authoritative for whatever the test publishes:
 * TXT records by name; any other name is NXDOMAIN. Every question it hears is kept.
 */
export async function startDnsServer() {
  const records = new Map<string, DnsAnswer>();
  const questions: { name: string; type: number }[] = [];
  const server = dns2.createServer({
    udp: true,
    handle: (request, send) => {
      const response = Packet.createResponseFromRequest(request);
      const [question] = request.questions;
      if (!question) return void send(response);
      const name = question.name.toLowerCase().replace(/\.$/, '');
      questions.push({ name, type: question.type });
      const answer = records.get(name);
      if (answer === 'silence') return;
      if (answer === 'servfail') {
        response.header.rcode = SERVFAIL;
      } else if (answer === undefined) {
        response.header.rcode = NXDOMAIN;
      } else if (question.type === Packet.TYPE.TXT) {
        for (const value of answer)
          response.answers.push({ name: question.name, type: Packet.TYPE.TXT, class: Packet.CLASS.IN, ttl: 60, data: value } as never);
      }
      void send(response);
    },
  });
  const addresses = await server.listen({ udp: { port: 0, address: '127.0.0.1' } });
  const { port } = addresses.udp as AddressInfo;
  return {
    /** For DNS_SERVERS. */
    server: `127.0.0.1:${port}`,
    questions,
    publish(name: string, answer: DnsAnswer) {
      records.set(name.toLowerCase(), answer);
    },
    clear(name: string) {
      records.delete(name.toLowerCase());
    },
    close: () => server.close(),
  };
}
