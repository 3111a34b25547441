import { webAppPage } from '../../src/lib/web-app';

describe('webAppPage', () => {
  it('keeps a path on the web app', () => {
    expect(webAppPage('https://app.example', '/org/acme/toolboxes?tab=2')).toBe('https://app.example/org/acme/toolboxes?tab=2');
    expect(webAppPage('https://app.example/console', '/org/acme')).toBe('https://app.example/console/org/acme');
    expect(webAppPage('https://app.example', null)).toBe('https://app.example/');
  });

  it.each([
    ['//evil.example/x'],
    ['/\t/evil.example'],
    ['/\n/evil.example'],
    ['/\\evil.example'],
    ['\\\\evil.example'],
    ['https://evil.example/'],
    ['javascript:alert(1)'],
    ['evil.example'],
  ])('lands %j on the fallback, never on another host', (path) => {
    expect(webAppPage('https://app.example', path)).toBe('https://app.example/');
    expect(webAppPage('https://app.example', path, '/sign-in')).toBe('https://app.example/sign-in');
  });

  it('stays under the web app’s path', () => {
    expect(webAppPage('https://app.example/console', '/../admin')).toBe('https://app.example/console/');
  });
});
