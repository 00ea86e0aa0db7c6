class Config
  def configure(&block)
    instance_eval(&block)
  end

  def call(name, *args)
    raise ArgumentError unless %w[start stop].include?(name)
    public_send(name, *args)
  end
end
