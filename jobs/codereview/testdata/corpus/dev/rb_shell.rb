def thumbnail(file)
  system("convert #{file} -resize 100x100 thumb.png") # want: command-injection
end

def listing(dir)
  `ls -la #{dir}` # want: command-injection
end

def log(branch)
  %x(git log --oneline #{branch}) # want: command-injection
end

def remove(path)
  system "rm -rf #{path}" # want: command-injection
end
