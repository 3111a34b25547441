import nodemailer from 'nodemailer';
import type { Logger } from 'pino';

export interface EmailMessage {
  to: string[];
  cc?: string[];
  bcc?: string[];
  subject: string;
  text: string;
}

export interface Mailer {
  send(message: EmailMessage): Promise<void>;
  close(): void;
}

/**
 * Email through SMTP when SMTP_URL is set (smtp://user:pass@host:port, smtps:// for TLS);
 * otherwise each message is noted in the log (recipients and subject: a sign-in link is a
 * secret and never enters the log stream) and, for the person at the terminal of a local
 * `make start`, written whole to `terminal` (the server's stderr), so they can sign in.
 */
export function createMailer(smtpUrl: string | null, from: string, logger: Logger, timeoutMs = 10_000, terminal?: { write(text: string): unknown }): Mailer {
  if (!smtpUrl) {
    const transport = nodemailer.createTransport({ jsonTransport: true });
    return {
      async send(message) {
        await transport.sendMail({ from, ...message });
        terminal?.write(['', `Email to ${message.to.join(', ')} (SMTP_URL is not set): ${message.subject}`, message.text, ''].join('\n'));
        logger.info(
          { email: { to: message.to, cc: message.cc, bcc: message.bcc, subject: message.subject } },
          'email written to the log (SMTP_URL is not set)',
        );
      },
      close: () => transport.close(),
    };
  }
  const transport = nodemailer.createTransport(smtpUrl, {
    connectionTimeout: timeoutMs,
    greetingTimeout: timeoutMs,
    socketTimeout: timeoutMs,
  } as object);
  return {
    async send(message) {
      await transport.sendMail({ from, ...message });
    },
    close: () => transport.close(),
  };
}
