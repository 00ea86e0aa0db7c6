function parse(text, name) {
  const data = JSON.parse(text);
  const m = /^(\w+)=(\d+)$/.exec(text);
  const re = new RegExp("^" + name);
  const hit = re.exec(text);
  setTimeout(() => notify(name), 1000);
  setTimeout(notify, 1000, name);
  const ratio = data.total / 2 / data.count;
  return { data, m, hit, ratio };
}
